"""Reads along a branch's path, and the alternatives at its fork points.

A path is a chain of segments: each ancestor gives the seqs up to where the next branch
forked from it, and the branch itself gives the rest (see models.Branch). The chain is
read from the branch's `lineage`, so these reads touch only the segments a range covers:
one indexed query per read whatever the conversation's length or number of branches, and
one per SEGMENTS_PER_QUERY segments for a range that crosses more of them.
"""

import bisect
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from django.db.models import Q

from conversations.models import Branch, Conversation, Message
from conversations.tool_pairing import OpenCalls

BRANCH_FIELDS = ("id", "parent_id", "fork_seq", "message_count", "created_at")
# The most segments one query names: SQLite refuses a WHERE of more than about a thousand
# ORed terms, and both databases plan a long OR more slowly than its pieces. A page (at
# most 201 seqs) always fits.
SEGMENTS_PER_QUERY = 256
# A tool call or result as the pairing rule reads it: (role, call ids, tool_call_id).
CallRow = tuple[str, list[str], str]
CALL_ROWS_CHUNK = 2000


@dataclass(frozen=True)
class Segment:
    """The part of a path one branch gives: seqs after `fork_seq` up to `last`."""

    branch_id: UUID
    parent_id: UUID | None
    fork_seq: int
    last: int


def branch_segments(branch: Branch) -> list[Segment]:
    """The path's segments, root first; ancestors that give no seq are left out."""
    segments: list[Segment] = []
    parent: UUID | None = None
    after = 0
    for ancestor, until in branch.lineage:
        key = UUID(str(ancestor))
        if until > after:
            segments.append(Segment(key, parent, after, until))
        parent, after = key, until
    segments.append(Segment(branch.id, branch.parent_id, branch.fork_seq, branch.message_count))
    return segments


def segment_owning(branch: Branch, seq: int) -> Segment:
    """The segment holding `seq` on the branch's path (seq 0 belongs to the root)."""
    segments = branch_segments(branch)
    for segment in segments:
        if segment.fork_seq < seq <= segment.last:
            return segment
    return segments[0]


def path_ranges(branch: Branch, *, after: int, last: int) -> list[tuple[UUID, int, int]]:
    """(branch id, low, high) for each segment of the branch's path holding seqs with
    after < seq <= last: low < seq <= high on that branch. In seq order."""
    return [
        (s.branch_id, max(after, s.fork_seq), min(last, s.last))
        for s in branch_segments(branch)
        if max(after, s.fork_seq) < min(last, s.last)
    ]


def ranges_filter(ranges: Sequence[tuple[UUID, int, int]]) -> Q:
    """Messages with low < seq <= high on any of these (branch id, low, high)."""
    return Q(
        *(Q(branch_id=key, seq__gt=low, seq__lte=high) for key, low, high in ranges),
        _connector=Q.OR,
    )


def path_filter(branch: Branch, *, after: int, last: int) -> Q | None:
    """Messages of the branch's path with after < seq <= last (None: the range is empty).
    One condition: for a range of at most SEGMENTS_PER_QUERY segments (path_querysets
    reads longer ones)."""
    ranges = path_ranges(branch, after=after, last=last)
    return ranges_filter(ranges) if ranges else None


def path_messages(branch: Branch, *, after: int, last: int) -> Any:
    """A queryset of the path's messages in the range, in seq order: one query, for a
    range of at most SEGMENTS_PER_QUERY segments such as a page (path_querysets reads a
    range of any length)."""
    condition = path_filter(branch, after=after, last=last)
    if condition is None:
        return Message.objects.none()
    return Message.objects.filter(condition).order_by("seq")


def path_querysets(branch: Branch, *, after: int, last: int) -> Iterator[Any]:
    """The path's messages in a range of any length, as querysets in seq order, each
    naming at most SEGMENTS_PER_QUERY segments: read one after the other, they give the
    range in order."""
    ranges = path_ranges(branch, after=after, last=last)
    for start in range(0, len(ranges), SEGMENTS_PER_QUERY):
        part = ranges[start : start + SEGMENTS_PER_QUERY]
        yield Message.objects.filter(ranges_filter(part)).order_by("seq")


# Rows one step of `path_last` may read: segments are taken together, newest first,
# until they hold about this many messages.
LAST_SCAN_ROWS = 1000


def path_last(branch: Branch, *, at_most: int, **match: Any) -> Message | None:
    """The path's last message with seq <= at_most that matches `match`, walking the
    segments backwards: a long segment is an index scan that stops at the first hit, and
    short ones are read together (up to LAST_SCAN_ROWS rows a query), so a path crossing
    thousands of forks costs a query per thousand of its messages, not one per fork."""
    ranges = path_ranges(branch, after=0, last=at_most)
    while ranges:
        group = [ranges.pop()]
        rows = group[0][2] - group[0][1]
        while ranges and len(group) < SEGMENTS_PER_QUERY:
            _, low, high = ranges[-1]
            if rows + high - low > LAST_SCAN_ROWS:
                break
            group.append(ranges.pop())
            rows += high - low
        found = Message.objects.filter(ranges_filter(group), **match).order_by("-seq").first()
        if found is not None:
            return found
    return None


def path_call_rows(branch: Branch, *, after: int, last: int) -> Iterator[CallRow]:
    """The tool calls and results of the branch's path with after < seq <= last, in seq
    order, as (role, call ids, tool_call_id): the messages that neither call nor answer
    stay out of the read."""
    for messages in path_querysets(branch, after=after, last=last):
        rows = (
            messages.filter(role__in=(Message.Role.ASSISTANT, Message.Role.TOOL))
            .exclude(role=Message.Role.ASSISTANT, tool_calls=[])
            .values_list("role", "tool_calls", "tool_call_id")
        )
        for role, calls, answered in rows.iterator(chunk_size=CALL_ROWS_CHUNK):
            yield role, [str(call.get("id") or "") for call in calls], answered


def path_open_calls(branch: Branch, *, last: int) -> OpenCalls:
    """The calls of the branch's path up to seq `last` that no result has answered yet."""
    calls = OpenCalls()
    for role, call_ids, answered in path_call_rows(branch, after=0, last=last):
        calls.skim(role=role, call_ids=call_ids, tool_call_id=answered)
    return calls


def branch_get(*, conversation: Conversation, branch_id: UUID | str | None) -> Branch:
    """The conversation's branch (its active one for None), or Branch.DoesNotExist."""
    if branch_id is None:
        return branch_active(conversation=conversation)
    try:
        key = UUID(str(branch_id))
    except ValueError:
        raise Branch.DoesNotExist from None
    return Branch.objects.get(pk=key, conversation=conversation)


def branch_active(*, conversation: Conversation) -> Branch:
    """The branch the conversation shows: read fresh, since its counter moves on append."""
    if conversation.active_branch_id is not None:
        found = Branch.objects.filter(pk=conversation.active_branch_id).first()
        if found is not None:
            return found
    return Branch.objects.get(conversation=conversation, parent__isnull=True)


def branches_list(*, conversation: Conversation) -> list[dict[str, Any]]:
    """Every branch of the conversation, the root first, then in order of creation."""
    rows = Branch.objects.filter(conversation=conversation).values(*BRANCH_FIELDS)
    return sorted(rows, key=lambda r: (r["parent_id"] is not None, r["created_at"], str(r["id"])))


def branch_count(*, conversation: Conversation) -> int:
    return Branch.objects.filter(conversation=conversation).count()


def message_get(*, conversation: Conversation, message_id: UUID | str) -> Message:
    """One of the conversation's messages, on any branch, or Message.DoesNotExist."""
    try:
        key = UUID(str(message_id))
    except ValueError:
        raise Message.DoesNotExist from None
    return Message.objects.select_related("branch").get(pk=key, conversation=conversation)


def _fork_point(segment: Segment, seq: int) -> tuple[UUID, int]:
    """Where a message at `seq` of `segment` has its alternatives: (owner, seq - 1).

    A branch's first message is an alternative of its parent's message at that seq and
    of its siblings' first messages; any later message, of the children forked just
    before it.
    """
    if segment.parent_id is not None and seq == segment.fork_seq + 1:
        return segment.parent_id, seq - 1
    return segment.branch_id, seq - 1


def alternatives_at(
    branch: Branch, seqs: Iterable[int], *, branch_count: int | None = None
) -> dict[int, dict[str, Any] | None]:
    """For messages at these seqs of the branch's path: the alternatives a client draws
    as `< index+1/count >`, or None where there are none. One query for a page (one per
    SEGMENTS_PER_QUERY fork owners beyond), reading only the branches forked at these
    seqs.

    The choices at a fork point are the owner's own message there (if it has one) and
    every child branch forked there that holds a message, oldest first; switching to one
    shows that branch's path.
    """
    wanted = sorted(set(seqs))
    if not wanted or branch_count == 1:
        # One branch: nothing to choose from, and no query to find that out.
        return dict.fromkeys(wanted)
    segments = branch_segments(branch)
    lasts = [s.last for s in segments]  # ascending: segments follow each other
    where: dict[int, tuple[Segment, tuple[UUID, int]]] = {}
    for seq in wanted:
        index = bisect.bisect_left(lasts, seq)
        if index < len(segments) and segments[index].fork_seq < seq:
            segment = segments[index]
            where[seq] = (segment, _fork_point(segment, seq))
    # Each owner's own fork points: a page's children, never those of another page.
    points: dict[UUID, set[int]] = {}
    for _, (owner, fork_seq) in where.values():
        points.setdefault(owner, set()).add(fork_seq)
    owners_needed = {
        owner for (segment, (owner, _)) in where.values() if owner != segment.branch_id
    }
    forks = [Q(parent_id=owner, fork_seq__in=seqs) for owner, seqs in points.items()]
    by_id: dict[UUID, dict[str, Any]] = {}
    for start in range(0, len(forks), SEGMENTS_PER_QUERY):
        condition = Q(*forks[start : start + SEGMENTS_PER_QUERY], _connector=Q.OR)
        if start == 0 and owners_needed:
            condition |= Q(pk__in=owners_needed)
        by_id.update(
            (row["id"], row) for row in Branch.objects.filter(condition).values(*BRANCH_FIELDS)
        )
    # Grouped once, so a page costs one pass over the rows, not one per message.
    children: dict[tuple[UUID, int], list[dict[str, Any]]] = {}
    for row in sorted(by_id.values(), key=lambda r: (r["created_at"], str(r["id"]))):
        children.setdefault((row["parent_id"], row["fork_seq"]), []).append(row)
    return {
        seq: _choices(
            children.get((owner, fork_seq), []),
            owner_row=by_id.get(owner),
            owner=owner,
            fork_seq=fork_seq,
            mine=segment.branch_id,
        )
        for seq, (segment, (owner, fork_seq)) in where.items()
    }


def _choices(
    children: Sequence[Mapping[str, Any]],
    *,
    owner_row: Mapping[str, Any] | None,
    owner: UUID,
    fork_seq: int,
    mine: UUID,
) -> dict[str, Any] | None:
    """The choices at one fork point: the owner's own message there (if it has one), then
    the children forked there that hold a message (or the branch being read), oldest
    first."""
    ids = [r["id"] for r in children if r["message_count"] > fork_seq or r["id"] == mine]
    owner_has_one = mine == owner or (
        owner_row is not None and owner_row["message_count"] > fork_seq
    )
    if owner_has_one:
        ids.insert(0, owner)
    if len(ids) < 2:
        return None
    return {
        "index": ids.index(mine),
        "count": len(ids),
        "branch_ids": [str(key) for key in ids],
    }


# A message's role, text, tool calls, reasoning and server payload (an assistant turn's
# phase, a summary's reach), as the OpenAI-compatible API pages a path: the rest of a
# message stays out of the read.
PATH_ROW_FIELDS = (
    *("id", "seq", "role", "kind", "content", "tool_calls", "tool_call_id", "name"),
    *("reasoning", "provider_payload"),
)


def path_rows(*, branch: Branch, after: int, last: int) -> list[dict[str, Any]]:
    """The messages of the branch's path with after < seq <= last, in seq order, as
    PATH_ROW_FIELDS rows."""
    last = min(last, branch.message_count)
    if last <= after:
        return []
    return list(path_messages(branch, after=max(0, after), last=last).values(*PATH_ROW_FIELDS))


def path_message_get(*, conversation: Conversation, message_id: UUID) -> tuple[Branch, Message]:
    """The active branch and one message on its path, or Message.DoesNotExist: a message
    of another conversation, or one left on a branch the conversation no longer shows."""
    branch = branch_active(conversation=conversation)
    message = Message.objects.filter(pk=message_id, conversation=conversation).first()
    if (
        message is None
        or message.seq > branch.message_count
        or segment_owning(branch, message.seq).branch_id != message.branch_id
    ):
        raise Message.DoesNotExist
    return branch, message


def message_row(message: Message) -> dict[str, Any]:
    """A message as the PATH_ROW_FIELDS row `path_rows` gives."""
    return {name: getattr(message, name) for name in PATH_ROW_FIELDS}
