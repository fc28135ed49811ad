"""The stored history a model call is sent, read along a branch's path.

This read runs before every model call, on up to PARLEY_CONTEXT_MAX_MESSAGES rows, where
the ORM spent more CPU building the query and converting its rows than the database
spent answering it: its statement is written once (conversations/sql) and its rows are
plain tuples.
"""

from conversations import sql
from conversations.models import Branch
from conversations.selectors.branches import SEGMENTS_PER_QUERY, path_ranges
from conversations.sql import HistoryRow

__all__ = ["HistoryRow", "path_history"]


def path_history(branch: Branch, *, after: int, last: int) -> list[HistoryRow]:
    """The messages of the branch's path with after < seq <= last, in seq order: the
    rows `path_messages` selects, one range per segment (a statement per
    SEGMENTS_PER_QUERY segments, for a tail crossing more forks than that)."""
    ranges = path_ranges(branch, after=after, last=last)
    if len(ranges) <= SEGMENTS_PER_QUERY:
        return sql.path_history_read(ranges=ranges)
    rows: list[HistoryRow] = []
    for start in range(0, len(ranges), SEGMENTS_PER_QUERY):
        rows += sql.path_history_read(ranges=ranges[start : start + SEGMENTS_PER_QUERY])
    return rows
