"""Forks: a new conversation holding copies of another's path up to a message; the copy
of a path that forks and shared links' "continue" share; and the bulk insert of copied
messages that forks and imports share."""

from collections.abc import Iterable, Iterator
from uuid import UUID

from django.db import transaction

from conversations.errors import Problem, ValidationFailed
from conversations.models import Branch, Conversation, Message
from conversations.selectors.branches import branch_get, path_last, path_querysets
from conversations.selectors.shares import shown_to_readers
from conversations.serializers import MESSAGE_FIELDS
from conversations.services.attachments import attachments_copy
from conversations.services.common import raise_if
from conversations.services.quotas import conversation_quota_check

# Rows per INSERT when copying many messages (fork, import): bounded memory per batch.
BULK_BATCH = 1000

# A fork copies what a message says, not which conversation or run it belonged to.
COPIED_FIELDS = tuple(
    f for f in MESSAGE_FIELDS if f not in {"id", "conversation_id", "branch_id", "run_id"}
)


def conversation_fork(
    *, conversation: Conversation, at_seq: int, branch_id: UUID | str | None = None
) -> Conversation:
    """A new conversation of the same owner with copies of messages 1..at_seq of a branch's
    path (the active branch by default), on its one root branch.

    Refuses a point that would separate an assistant's tool calls from their results.
    Raises Branch.DoesNotExist for a branch of another conversation.
    """
    if isinstance(at_seq, bool) or not isinstance(at_seq, int):
        raise ValidationFailed([Problem("$.at_seq", "must be an integer")])
    branch = branch_get(conversation=conversation, branch_id=branch_id)
    if not 1 <= at_seq <= branch.message_count:
        raise ValidationFailed(
            [Problem("$.at_seq", f"must be between 1 and {branch.message_count}")]
        )
    raise_if(_fork_split_problems(branch=branch, at_seq=at_seq))

    with transaction.atomic():
        conversation_quota_check(owner_id=conversation.owner_id)
        fork = Conversation.objects.create(
            owner_id=conversation.owner_id,
            title=conversation.title,
            system_prompt=conversation.system_prompt,
            model=conversation.model,
            tools=conversation.tools,
            draft=conversation.draft,
            draft_edited=conversation.draft_edited,
            metadata=conversation.metadata,
            # The generation settings go with it: the fork goes on as the original would.
            temperature=conversation.temperature,
            max_output_tokens=conversation.max_output_tokens,
            vision=conversation.vision,
            message_count=at_seq,
            forked_from=conversation,
            forked_at_seq=at_seq,
        )
        copies = path_copy(branch=branch, last=at_seq, into=fork)
        attachments_copy(conversation_id=fork.pk, copies=copies)
    return fork


def path_copy(
    *, branch: Branch, last: int, into: Conversation, shown_only: bool = False
) -> dict[UUID, UUID]:
    """Copy messages 1..last of a branch's path onto the root branch of `into` (new),
    BULK_BATCH rows per INSERT; the copies' ids by original's. With `shown_only`, only what
    a share link's reader sees (selectors.shares.shown_to_readers) and the copies' seqs
    close up. The caller sets the message counts."""
    root = into.active_branch_id
    assert root is not None  # born with its root branch
    copies: dict[UUID, UUID] = {}

    def copied() -> Iterator[Message]:
        for source in path_querysets(branch, after=0, last=last):
            if shown_only:
                source = shown_to_readers(source)
            for row in source.values("id", *COPIED_FIELDS).iterator(chunk_size=BULK_BATCH):
                original = row.pop("id")
                if shown_only:
                    row["seq"] = len(copies) + 1
                message = Message(conversation=into, branch_id=root, copied=True, **row)
                copies[original] = message.pk
                yield message

    messages_bulk_insert(copied())
    return copies


def _fork_split_problems(*, branch: Branch, at_seq: int) -> list[Problem]:
    last_assistant = path_last(branch, at_most=at_seq, role=Message.Role.ASSISTANT)
    if last_assistant is None or not last_assistant.tool_calls:
        return []
    later = [
        row
        for rows in path_querysets(branch, after=last_assistant.seq, last=at_seq)
        for row in rows.values_list("role", "tool_call_id")
    ]
    # A user message after the calls closes the group: the run stopped without results
    # (the model input fills those in), so there is nothing left to separate.
    if any(role == Message.Role.USER for role, _ in later):
        return []
    answered = {call_id for role, call_id in later if role == Message.Role.TOOL}
    if all(call["id"] in answered for call in last_assistant.tool_calls):
        return []
    return [
        Problem(
            "$.at_seq",
            f"message {at_seq} is inside a tool call group (the assistant's calls at seq "
            f"{last_assistant.seq} are not all answered by then); fork below "
            f"{last_assistant.seq} or at the seq of its last result or later",
        )
    ]


def messages_bulk_insert(rows: Iterable[Message]) -> None:
    """Insert many copied messages, BULK_BATCH rows per statement."""
    batch: list[Message] = []
    for row in rows:
        batch.append(row)
        if len(batch) >= BULK_BATCH:
            Message.objects.bulk_create(batch)
            batch = []
    if batch:
        Message.objects.bulk_create(batch)
