"""Walking an imported tree of branches in linear time.

Every path of the tree is checked as one line (tool results answering earlier calls of
that path), but paths share their beginnings: the walk goes depth first, message by
message, so each shared message is read once, and the calls a message opened or closed
are put back as they were when the walk climbs back above it. Copying the open calls at
every fork point instead costs their number times the number of forks.

Also the bound on how deeply branches may nest: each stored branch keeps the chain of
branches above it (models.Branch.lineage), so a tree whose branches each fork from the
one before costs storage in the square of its size.
"""

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from uuid import UUID

from django.conf import settings

from conversations.errors import Problem
from conversations.tool_pairing import OpenCalls

if TYPE_CHECKING:
    from conversations.formats.importing import ImportedBranch, ImportedMessage


# Links of the branches' chains an import may make per message it may hold: a tree a
# few levels deep never nears it, branches each forked from the one before soon do.
BRANCH_LINKS_PER_MESSAGE = 10


def branch_links_limit() -> int:
    """The most links an import's branches' chains may hold in all."""
    limit: int = settings.PARLEY_IMPORT_MAX_MESSAGES * BRANCH_LINKS_PER_MESSAGE
    return limit


def nesting_problems(branches: "Sequence[ImportedBranch]") -> list[Problem]:
    """Refuse a tree whose branches' chains (each branch's ancestors) add up to more than
    branch_links_limit(). `branches` lists every parent before its children."""
    limit = branch_links_limit()
    depth: dict[UUID, int] = {}
    total = 0
    for branch in branches:
        level = depth.get(branch.parent_id, -1) + 1 if branch.parent_id is not None else 0
        depth[branch.id] = level
        total += level
        if total > limit:
            return [
                Problem(
                    "$.branches",
                    f"nest too deeply to store: each branch keeps the chain of branches it "
                    f"forked from, and these chains add up to more than {limit:,} links "
                    f"(the first {branch.id} is {level:,} deep)",
                )
            ]
    return []


# What a message changed in the open calls: each call id it named, and whether that id
# was open before it.
_Undo = list[tuple[str, bool]]


@dataclass
class _Frame:
    branch: "ImportedBranch"
    children: Iterator["ImportedBranch"]
    offset: int = 0
    undo: list[_Undo] = field(default_factory=list)


def _named(message: "ImportedMessage", pending: OpenCalls) -> _Undo:
    ids = [call.id for call in message.tool_calls]
    if message.tool_call_id:
        ids.append(message.tool_call_id)
    return [(call_id, call_id in pending) for call_id in dict.fromkeys(ids)]


def _put_back(pending: OpenCalls, undo: _Undo) -> None:
    for call_id, was_open in undo:
        if was_open and call_id not in pending:
            pending.skim(role="assistant", call_ids=[call_id], tool_call_id=None)
        elif not was_open and call_id in pending:
            pending.skim(role="tool", call_ids=[], tool_call_id=call_id)


def tree_messages(
    branches: "Sequence[ImportedBranch]",
    messages: "Sequence[ImportedMessage]",
    pending: OpenCalls,
) -> Iterator[tuple[int, "ImportedMessage", int]]:
    """(index in $.messages, message, the seq expected there) for every message, each
    path in order: when a message is yielded, `pending` holds the calls still open on its
    path before it, and the caller reads the message into it. The branches must make a
    tree (parents listed first, each branch's messages together); a branch the walk
    cannot reach (its fork point names a seq its parent lacks) is walked on its own."""
    own: dict[Any, list[tuple[int, ImportedMessage]]] = {}
    for index, message in enumerate(messages):
        own.setdefault(getattr(message, "branch_id", None), []).append((index, message))
    children: dict[tuple[UUID, int], list[ImportedBranch]] = {}
    for branch in branches:
        if branch.parent_id is not None:
            children.setdefault((branch.parent_id, branch.fork_seq), []).append(branch)
    expanded: set[tuple[UUID, int]] = set()
    visited: set[UUID] = set()

    def forked_at(key: tuple[UUID, int]) -> Iterator["ImportedBranch"]:
        if key in expanded:
            return iter(())
        expanded.add(key)
        return iter(children.get(key, ()))

    for start in branches:
        if start.id in visited:
            continue
        stack = [_Frame(start, forked_at((start.id, start.fork_seq)))]
        visited.add(start.id)
        while stack:
            frame = stack[-1]
            child = next(frame.children, None)
            if child is not None:
                if child.id not in visited:
                    visited.add(child.id)
                    stack.append(_Frame(child, forked_at((child.id, child.fork_seq))))
                continue
            mine = own.get(frame.branch.id, [])
            if frame.offset < len(mine):
                index, message = mine[frame.offset]
                frame.offset += 1
                frame.undo.append(_named(message, pending))
                yield index, message, frame.branch.fork_seq + frame.offset
                frame.children = forked_at((frame.branch.id, message.seq))
                continue
            for undo in reversed(frame.undo):
                _put_back(pending, undo)
            stack.pop()
