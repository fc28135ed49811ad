"""Copies of whole conversations: fork and import."""

import uuid
from collections import Counter
from collections.abc import Iterable
from datetime import timedelta
from typing import Any
from uuid import UUID

from django.db import transaction

from accounts.models import User
from conversations.errors import Problem, ValidationFailed
from conversations.formats.importing import ParsedExport, parse_export
from conversations.models import AuditEvent, Branch, Conversation, Message
from conversations.selectors.branches import branch_get, path_last, path_messages
from conversations.serializers import MESSAGE_FIELDS
from conversations.services.audit import audit_record
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

    source = path_messages(branch, after=0, last=at_seq).values(*COPIED_FIELDS)
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
            message_count=at_seq,
            forked_from=conversation,
            forked_at_seq=at_seq,
        )
        root = fork.active_branch_id
        assert root is not None  # born with its root branch, at_seq messages long
        _bulk_insert(
            Message(conversation=fork, branch_id=root, copied=True, **row)
            for row in source.iterator(chunk_size=BULK_BATCH)
        )
    return fork


def _fork_split_problems(*, branch: Branch, at_seq: int) -> list[Problem]:
    last_assistant = path_last(branch, at_most=at_seq, role=Message.Role.ASSISTANT)
    if last_assistant is None or not last_assistant.tool_calls:
        return []
    later = list(
        path_messages(branch, after=last_assistant.seq, last=at_seq).values_list(
            "role", "tool_call_id"
        )
    )
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


def _bulk_insert(rows: Iterable[Message]) -> None:
    batch: list[Message] = []
    for row in rows:
        batch.append(row)
        if len(batch) >= BULK_BATCH:
            Message.objects.bulk_create(batch)
            batch = []
    if batch:
        Message.objects.bulk_create(batch)


def conversation_import(*, owner: User, document: bytes | str) -> Conversation:
    """Store a conversation for `owner` from an export, a minimal document or a chat
    fine-tuning line (formats/importing.py): everything or nothing. A tree of branches
    comes back as the same tree, with new ids, and the same branch active.

    Raises ValidationFailed listing every problem, each with its JSON path.
    """
    parsed = parse_export(document)
    data = parsed.conversation
    # Version 1 exports and the short forms carry no generation settings or reasoning.
    settings = {
        "temperature": getattr(data, "temperature", None),
        "max_output_tokens": getattr(data, "max_output_tokens", None),
    }
    last_times = [m.created_at for m in parsed.messages]
    with transaction.atomic():
        conversation_quota_check(owner_id=owner.pk)
        conversation = Conversation.objects.create(
            owner=owner,
            title=data.title,
            system_prompt=data.system_prompt,
            model=data.model,
            tools=data.tools,
            metadata=data.metadata,
            draft=data.draft,
            created_at=data.created_at,
            updated_at=data.updated_at,
            last_activity_at=max([data.updated_at, *last_times]),
            message_count=len(parsed.messages),
            **settings,
        )
        branch_ids = _branches_store(conversation, parsed)
        _bulk_insert(
            Message(
                conversation=conversation,
                branch_id=branch_ids.get(getattr(m, "branch_id", None), branch_ids[None]),
                seq=m.seq,
                role=m.role,
                kind=m.kind,
                content=m.content,
                reasoning=getattr(m, "reasoning", ""),
                reasoning_ms=getattr(m, "reasoning_ms", None),
                tool_calls=[call.model_dump() for call in m.tool_calls],
                tool_call_id=m.tool_call_id or "",
                name=m.name or "",
                usage=m.usage,
                created_at=m.created_at,
                provider_payload=m.provider_payload,
                copied=True,
            )
            for m in parsed.messages
        )
        audit_record(actor=owner, action=AuditEvent.Action.IMPORTED, conversation=conversation)
    return conversation


def _branches_store(conversation: Conversation, parsed: ParsedExport) -> dict[UUID | None, UUID]:
    """The document's branches as new rows: its id -> the stored id (None: the root).

    The root is the one the conversation was born with; the others keep their fork
    points and times, and the document's active branch stays active.
    """
    root = conversation.active_branch_id
    assert root is not None
    own = Counter(getattr(m, "branch_id", None) for m in parsed.messages)
    if not parsed.branches:
        Branch.objects.filter(pk=root).update(message_count=len(parsed.messages))
        return {None: root}
    first = parsed.branches[0]
    ids: dict[UUID | None, UUID] = {None: root, first.id: root}
    lineages: dict[UUID, list[list[Any]]] = {root: []}
    Branch.objects.filter(pk=root).update(message_count=own[first.id], created_at=first.created_at)
    rows = []
    # Exports list branches by depth then creation time: equal times (documents written
    # elsewhere) are moved a microsecond apart, so the document's order survives.
    taken = {first.created_at}
    for branch in parsed.branches[1:]:
        created = branch.created_at
        while created in taken:
            created += timedelta(microseconds=1)
        taken.add(created)
        parent = ids[branch.parent_id]
        new = Branch(
            id=uuid.uuid4(),
            conversation=conversation,
            parent_id=parent,
            fork_seq=branch.fork_seq,
            message_count=branch.fork_seq + own[branch.id],
            lineage=[*lineages[parent], [str(parent), branch.fork_seq]],
            created_at=created,
        )
        ids[branch.id] = new.id
        lineages[new.id] = new.lineage
        rows.append(new)
    Branch.objects.bulk_create(rows, batch_size=BULK_BATCH)
    active = ids.get(parsed.active_branch_id, root)
    Conversation.objects.filter(pk=conversation.pk).update(
        active_branch_id=active, branch_count=len(parsed.branches)
    )
    conversation.active_branch_id = active
    conversation.branch_count = len(parsed.branches)
    return ids
