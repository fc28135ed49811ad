"""Branched conversations for `bench.branches`, built with bulk inserts.

`tree_build` writes a conversation whose active path of `length` messages is a chain of
`chain` branches, each forked from the previous one's path at a turn's end (as an edit
does), so every fork point has the old turn and the edited one as alternatives. The
messages are `bench.state`'s realistic turns (tool-call groups in about 40% of them), with
a completed run per user turn. Regeneration-style siblings (one alternative reply) are
added at every user message of a 200-message window around a fork point deep in the
path, so one page holds dozens of messages with alternatives.

The rows point at each other (a branch's fork point names its parent's message, a message
names its branch), checked at commit, so one conversation is one transaction.
"""

import bisect
import itertools
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from random import Random
from typing import Any

from django.db import transaction

from accounts.models import User
from bench.state import prose, turns
from conversations.models import Branch, Conversation, Message, Run

BATCH = 5000
PAGE = 200
# The last branches of a long chain are short, as after a few edits near the end: the
# model input's tail then crosses several fork points, the last page too.
SHORT_TAIL = [60, 60, 60, 60, 60, 6]


@dataclass(frozen=True)
class Tree:
    conversation: Conversation
    leaf: Branch  # the last branch of the chain: the active path
    other: Branch  # the leaf's parent, to switch to and back
    boundary_after: int  # `after` of the page that spans a fork point deep in the path
    last_user: uuid.UUID
    last_assistant: uuid.UUID


def _grouped_turns(rng: Random) -> Iterator[list[dict[str, Any]]]:
    group: list[dict[str, Any]] = []
    for fields in turns(rng):
        if fields["role"] == "user" and group:
            yield group
            group = []
        group.append(fields)


def _pair(rng: Random) -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": prose(rng)},
        {"role": "assistant", "content": prose(rng, 300)},
    ]


def path_turns(rng: Random, length: int) -> list[list[dict[str, Any]]]:
    """Turns of exactly `length` messages in all, the last one a plain user/assistant
    pair (a context event pads an odd remainder)."""
    out: list[list[dict[str, Any]]] = []
    total = 0
    for group in _grouped_turns(rng):
        if total + len(group) > length - 2:
            break
        out.append(group)
        total += len(group)
    rest = length - total
    if rest % 2:
        out.append([{"role": "system", "kind": "event", "content": prose(rng, 80)}])
    out.extend(_pair(rng) for _ in range(rest // 2))
    return out


def fork_points(turn_ends: list[int], length: int, chain: int) -> list[int]:
    """`chain - 1` fork points at turn ends: even segments, then SHORT_TAIL's lengths."""
    tail = SHORT_TAIL[-(chain - 1) :] if chain > 2 else []
    targets: list[int] = []
    end = length
    for size in reversed(tail):
        end -= size
        targets.insert(0, end)
    even = chain - 1 - len(targets)
    limit = targets[0] if targets else length
    targets = [limit * (i + 1) // (even + 1) for i in range(even)] + targets
    points: list[int] = []
    for target in targets:
        index = bisect.bisect_right(turn_ends, target) - 1  # the last turn end <= target
        if index < 0 or (points and turn_ends[index] <= points[-1]):
            index = bisect.bisect_right(turn_ends, points[-1] if points else 0)
        if index >= len(turn_ends) or turn_ends[index] >= length:
            raise ValueError(f"no room for {chain} branches in {length} messages")
        points.append(turn_ends[index])
    return points


class _Writer:
    """Collects a conversation's rows: each user message gets a completed run, and the
    rest of its turn carries the run's id."""

    def __init__(self, conversation: Conversation, start: Any) -> None:
        self.conversation = conversation
        self.start = start
        self.messages: list[Message] = []
        self.runs: list[Run] = []
        self.run: Run | None = None

    def add(self, branch: uuid.UUID, seq: int, fields: dict[str, Any], **extra: Any) -> Message:
        message = Message(
            conversation=self.conversation,
            branch_id=branch,
            seq=seq,
            created_at=self.start + timedelta(seconds=seq),
            **fields,
        )
        if message.role == Message.Role.USER:
            self.run = Run(
                conversation=self.conversation,
                branch_id=branch,
                trigger_message_id=message.id,
                status=Run.Status.COMPLETED,
                iterations=1,
                created_at=message.created_at,
            )
            self.runs.append(self.run)
        elif message.role != Message.Role.SYSTEM:
            run: Run | None = extra.get("run", self.run)
            message.run_id = run.id if run is not None else None
        self.messages.append(message)
        return message

    def flush(self, force: bool = False) -> None:
        if force or len(self.messages) >= BATCH:
            Run.objects.bulk_create(self.runs)
            Message.objects.bulk_create(self.messages)
            self.runs, self.messages = [], []


def tree_build(
    owner: User, *, length: int, chain: int, rng: Random, deep_fork: int | None = None
) -> Tree:
    """A conversation whose active path of `length` messages crosses `chain` branches.
    `deep_fork` (an index into the fork points) gets the window of sibling replies."""
    groups = path_turns(rng, length)
    flat = [fields for group in groups for fields in group]
    turn_ends = list(itertools.accumulate(len(group) for group in groups))
    points = fork_points(turn_ends, length, chain)
    ids = [uuid.uuid4() for _ in range(chain)]
    lineages = [[[str(ids[j]), points[j]] for j in range(i)] for i in range(chain)]
    boundary_after = points[deep_fork] - PAGE // 2 if deep_fork is not None else 0
    users = [
        seq
        for seq in range(boundary_after + 1, min(boundary_after + PAGE, length))
        if deep_fork is not None and flat[seq - 1]["role"] == "user"
    ]
    counts = [point + 2 for point in points] + [length]
    with transaction.atomic():
        conversation = Conversation.objects.create(
            owner=owner,
            title=f"bench branches {length:,}",
            system_prompt="You are a concise assistant for a small analytics team.",
            active_branch_id=ids[-1],  # set: the conversation is not given a root of its own
            branch_count=chain + len(users),
            message_count=length + 2 * len(points) + len(users),
        )
        writer = _Writer(conversation, conversation.created_at - timedelta(seconds=length))
        branches = [
            Branch(
                id=ids[i],
                conversation=conversation,
                parent_id=ids[i - 1] if i else None,
                fork_seq=points[i - 1] if i else 0,
                message_count=counts[i],
                lineage=lineages[i],
                created_at=conversation.created_at,
            )
            for i in range(chain)
        ]
        seq_ids: dict[int, uuid.UUID] = {}
        for seq, fields in enumerate(flat, start=1):
            seq_ids[seq] = writer.add(ids[bisect.bisect_left(points, seq)], seq, fields).id
            writer.flush()
        for i, point in enumerate(points):  # the turn each edit replaced, left on its branch
            for offset, fields in enumerate(_pair(rng), start=1):
                writer.add(ids[i], point + offset, fields)
        for seq in users:  # regenerated replies: one sibling at each user message
            owner_index = bisect.bisect_left(points, seq)
            sibling = uuid.uuid4()
            branches.append(
                Branch(
                    id=sibling,
                    conversation=conversation,
                    parent_id=ids[owner_index],
                    fork_seq=seq,
                    message_count=seq + 1,
                    lineage=[*lineages[owner_index], [str(ids[owner_index]), seq]],
                    created_at=conversation.created_at,
                )
            )
            answer = Run(
                conversation=conversation,
                branch_id=sibling,
                trigger_message_id=seq_ids[seq],
                status=Run.Status.COMPLETED,
                iterations=1,
            )
            writer.runs.append(answer)
            reply = {"role": "assistant", "content": prose(rng, 300)}
            writer.add(sibling, seq + 1, reply, run=answer)
        writer.flush(force=True)
        Branch.objects.bulk_create(branches)
    conversation.refresh_from_db()
    last_user = max(seq for seq, fields in enumerate(flat, 1) if fields["role"] == "user")
    return Tree(
        conversation=conversation,
        leaf=Branch.objects.get(pk=ids[-1]),
        other=Branch.objects.get(pk=ids[-2]),
        boundary_after=boundary_after,
        last_user=seq_ids[last_user],
        last_assistant=seq_ids[length],
    )
