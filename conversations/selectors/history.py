"""The stored history a model call is sent, read along a branch's path.

This read runs before every model call, on up to PARLEY_CONTEXT_MAX_MESSAGES rows, and
the ORM spent more CPU building the query and converting its rows than the database
spent answering it. So its SQL is written once per number of path segments, and its rows
are plain tuples, converted as the ORM converts them (only a message with tool calls
has JSON worth decoding).
"""

from functools import cache
from typing import Any, NamedTuple

from django.db import DEFAULT_DB_ALIAS, connection, connections
from django.db.models import UUIDField

from config.rows import column, value_reader
from conversations.models import Branch, Message
from conversations.selectors.branches import branch_segments

_UUIDS: "UUIDField[Any, Any]" = UUIDField()
NO_CALLS = "[]"  # how both databases give back an empty list of tool calls


class HistoryRow(NamedTuple):
    """The fields of a stored message that the model sees (context.StoredMessage)."""

    role: str
    content: str
    tool_calls: list[dict[str, str]]
    tool_call_id: str


def path_history(branch: Branch, *, after: int, last: int) -> list[HistoryRow]:
    """The messages of the branch's path with after < seq <= last, in seq order: the
    rows `path_messages` selects, one range per segment."""
    ranges = [
        (segment.branch_id, max(after, segment.fork_seq), min(last, segment.last))
        for segment in branch_segments(branch)
        if max(after, segment.fork_seq) < min(last, segment.last)
    ]
    if not ranges:
        return []
    db = connections[DEFAULT_DB_ALIAS]
    params: list[Any] = []
    for key, low, high in ranges:
        params += [_UUIDS.get_db_prep_value(key, db), low, high]
    with db.cursor() as cursor:
        cursor.execute(_history_sql(len(ranges)), params)
        rows = cursor.fetchall()
    decode = value_reader(Message, "tool_calls", db)  # JSON, as the ORM decodes it
    return [
        HistoryRow(role, content, [] if calls == NO_CALLS else decode(calls), call_id)
        for role, content, calls, call_id in rows
    ]


@cache
def _history_sql(segments: int) -> str:
    def name(field: str) -> str:
        return column(Message, field)

    wanted = ", ".join(name(field) for field in ("role", "content", "tool_calls", "tool_call_id"))
    seq = name("seq")
    one = f"({name('branch')} = %s AND {seq} > %s AND {seq} <= %s)"
    return (
        f"SELECT {wanted} FROM {connection.ops.quote_name(Message._meta.db_table)} "
        f"WHERE {' OR '.join([one] * segments)} ORDER BY {seq} ASC"
    )
