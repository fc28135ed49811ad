"""Copies of whole conversations: fork and import."""

from collections.abc import Iterable

from django.db import transaction

from accounts.models import User
from conversations.errors import Problem, ValidationFailed
from conversations.formats.importing import parse_export
from conversations.models import AuditEvent, Conversation, Message
from conversations.serializers import MESSAGE_FIELDS
from conversations.services.audit import audit_record
from conversations.services.common import raise_if
from conversations.services.quotas import conversation_quota_check

# Rows per INSERT when copying many messages (fork, import): bounded memory per batch.
BULK_BATCH = 1000

# A fork copies what a message says, not which conversation or run it belonged to.
COPIED_FIELDS = tuple(f for f in MESSAGE_FIELDS if f not in {"id", "conversation_id", "run_id"})


def conversation_fork(*, conversation: Conversation, at_seq: int) -> Conversation:
    """A new conversation of the same owner with copies of messages 1..at_seq.

    Refuses a point that would separate an assistant's tool calls from their results.
    """
    if isinstance(at_seq, bool) or not isinstance(at_seq, int):
        raise ValidationFailed([Problem("$.at_seq", "must be an integer")])
    if not 1 <= at_seq <= conversation.message_count:
        raise ValidationFailed(
            [Problem("$.at_seq", f"must be between 1 and {conversation.message_count}")]
        )
    raise_if(_fork_split_problems(conversation=conversation, at_seq=at_seq))

    source = (
        Message.objects.filter(conversation=conversation, seq__lte=at_seq)
        .order_by("seq")
        .values(*COPIED_FIELDS)
    )
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
        _bulk_insert(
            Message(conversation=fork, copied=True, **row)
            for row in source.iterator(chunk_size=BULK_BATCH)
        )
    return fork


def _fork_split_problems(*, conversation: Conversation, at_seq: int) -> list[Problem]:
    last_assistant = (
        Message.objects.filter(
            conversation=conversation, seq__lte=at_seq, role=Message.Role.ASSISTANT
        )
        .order_by("-seq")
        .only("seq", "tool_calls")
        .first()
    )
    if last_assistant is None or not last_assistant.tool_calls:
        return []
    later = list(
        Message.objects.filter(
            conversation=conversation, seq__gt=last_assistant.seq, seq__lte=at_seq
        ).values_list("role", "tool_call_id")
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
    fine-tuning line (formats/importing.py): everything or nothing.

    Raises ValidationFailed listing every problem, each with its JSON path.
    """
    parsed = parse_export(document)
    data = parsed.conversation
    # Version 1 exports and the short forms carry no generation settings or reasoning.
    settings = {
        "temperature": getattr(data, "temperature", None),
        "max_output_tokens": getattr(data, "max_output_tokens", None),
    }
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
            last_activity_at=max([data.updated_at, *(m.created_at for m in parsed.messages[-1:])]),
            message_count=len(parsed.messages),
            **settings,
        )
        _bulk_insert(
            Message(
                conversation=conversation,
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
