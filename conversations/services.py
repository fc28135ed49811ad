"""Every write to conversations. Keyword-only functions named `<thing>_<action>`.

Appends allocate `seq` under a row lock on the conversation (SELECT ... FOR UPDATE on
PostgreSQL; an IMMEDIATE transaction on SQLite), so concurrent writers get a gapless
1..n sequence and the counters move in the same transaction as the rows.
"""

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from uuid import UUID

from django.db import transaction
from django.utils import timezone

from accounts.models import User
from conversations import validation
from conversations.errors import Problem, ValidationFailed
from conversations.exchange import parse_export
from conversations.models import AuditEvent, Conversation, Message, default_tools

# Rows per INSERT when copying many messages (fork, import): bounded memory per batch.
BULK_BATCH = 1000
TITLE_FROM_MESSAGE_CHARS = 80


class _Unset:
    """Marks a keyword the caller did not pass (None can be a real value)."""

    def __repr__(self) -> str:
        return "UNSET"


UNSET: Any = _Unset()


@dataclass(frozen=True)
class NewMessage:
    """A message to append; seq and conversation are assigned by the service."""

    role: str
    content: str = ""
    kind: str = Message.Kind.MESSAGE
    tool_calls: list[dict[str, str]] = field(default_factory=list)
    tool_call_id: str = ""
    name: str = ""
    run_id: UUID | None = None
    usage: dict[str, Any] | None = None
    provider_payload: dict[str, Any] | None = None
    created_at: datetime | None = None


def _raise_if(problems: list[Problem]) -> None:
    if problems:
        raise ValidationFailed(problems)


# --- conversations --------------------------------------------------------------------


def conversation_create(
    *,
    owner: User,
    title: str = "",
    system_prompt: str = "",
    model: str = "",
    tools: list[str] | None = None,
    metadata: dict[str, str] | None = None,
) -> Conversation:
    tools = default_tools() if tools is None else tools
    metadata = {} if metadata is None else metadata
    _raise_if(
        validation.title_problems(title)
        + validation.system_prompt_problems(system_prompt)
        + validation.model_problems(model)
        + validation.tools_problems(tools)
        + validation.metadata_problems(metadata)
    )
    return Conversation.objects.create(
        owner=owner,
        title=title.strip(),
        system_prompt=system_prompt,
        model=model,
        tools=tools,
        metadata=metadata,
    )


def conversation_update(
    *,
    conversation: Conversation,
    title: str = UNSET,
    system_prompt: str = UNSET,
    model: str = UNSET,
    tools: list[str] = UNSET,
    metadata: dict[str, str] = UNSET,
    archived: bool = UNSET,
) -> Conversation:
    """Change the settings that were passed; leave the rest untouched."""
    checks = {
        "title": validation.title_problems,
        "system_prompt": validation.system_prompt_problems,
        "model": validation.model_problems,
        "tools": validation.tools_problems,
        "metadata": validation.metadata_problems,
    }
    given = {
        "title": title,
        "system_prompt": system_prompt,
        "model": model,
        "tools": tools,
        "metadata": metadata,
    }
    changes: dict[str, Any] = {name: value for name, value in given.items() if value is not UNSET}
    problems: list[Problem] = []
    for name, value in changes.items():
        problems += checks[name](value)
    if archived is not UNSET and not isinstance(archived, bool):
        problems.append(Problem("$.archived", "must be true or false"))
    _raise_if(problems)

    if "title" in changes:
        changes["title"] = changes["title"].strip()
    if archived is not UNSET and archived != (conversation.archived_at is not None):
        changes["archived_at"] = timezone.now() if archived else None
    if not changes:
        return conversation
    changes["updated_at"] = timezone.now()
    for name, value in changes.items():
        setattr(conversation, name, value)
    conversation.save(update_fields=list(changes))
    return conversation


def conversation_delete(*, conversation: Conversation) -> None:
    """Hard delete. Messages and runs go as one DELETE each, never row by row in Python.

    That holds because nothing cascades from Message or Run and no delete signals are
    connected to them (tests/conversations/test_delete.py checks the query shape).
    """
    with transaction.atomic():
        conversation.delete()


# --- messages ------------------------------------------------------------------------


def _locked(conversation: Conversation) -> Conversation:
    """Re-read the conversation's mutable counters under a row lock for this transaction."""
    return (
        Conversation.objects.select_for_update()
        .only("id", "message_count", "title", "draft", "draft_edited")
        .get(pk=conversation.pk)
    )


def _insert(
    *, conversation: Conversation, locked: Conversation, messages: Sequence[NewMessage]
) -> list[Message]:
    """Insert after the locked conversation's last seq and move its counters."""
    now = timezone.now()
    start = locked.message_count
    rows = [
        Message(
            conversation_id=conversation.pk,
            seq=start + offset + 1,
            role=new.role,
            kind=new.kind,
            content=new.content,
            tool_calls=new.tool_calls,
            tool_call_id=new.tool_call_id,
            name=new.name,
            run_id=new.run_id,
            usage=new.usage,
            provider_payload=new.provider_payload,
            created_at=new.created_at or now,
        )
        for offset, new in enumerate(messages)
    ]
    Message.objects.bulk_create(rows)
    count = start + len(rows)
    Conversation.objects.filter(pk=conversation.pk).update(
        message_count=count, last_activity_at=now
    )
    conversation.message_count = count
    conversation.last_activity_at = now
    return rows


def messages_append(*, conversation: Conversation, messages: Sequence[NewMessage]) -> list[Message]:
    """Append messages in order, atomically: all get consecutive seqs or none is stored."""
    if not messages:
        return []
    with transaction.atomic():
        return _insert(conversation=conversation, locked=_locked(conversation), messages=messages)


def message_append(*, conversation: Conversation, message: NewMessage) -> Message:
    return messages_append(conversation=conversation, messages=[message])[0]


def user_message_append(*, conversation: Conversation, content: str) -> Message:
    """Store the user's next message, preceded by a draft-edit notice if one is due.

    The notice (`[user edited the draft to: "..."]`) tells the model *that* the user changed
    the draft and *to what*; it is stored once per edit, so the model never sees a stale one.
    The first user message also names an untitled conversation.
    """
    _raise_if(validation.content_problems(content))
    if not content.strip():
        raise ValidationFailed([Problem("$.content", "must not be empty")])
    with transaction.atomic():
        locked = _locked(conversation)
        new = []
        if locked.draft_edited:
            new.append(
                NewMessage(
                    role=Message.Role.SYSTEM,
                    kind=Message.Kind.DRAFT_EDIT,
                    content=draft_edit_notice(locked.draft),
                )
            )
        new.append(NewMessage(role=Message.Role.USER, content=content))
        rows = _insert(conversation=conversation, locked=locked, messages=new)

        changes: dict[str, Any] = {}
        if locked.draft_edited:
            changes["draft_edited"] = False
        if not locked.title:
            changes["title"] = title_from_message(content)
        if changes:
            Conversation.objects.filter(pk=conversation.pk).update(**changes)
            for name, value in changes.items():
                setattr(conversation, name, value)
        return rows[-1]


def context_event_add(*, conversation: Conversation, content: str) -> Message:
    """Store a context event (a system message that starts no run), in order."""
    _raise_if(validation.content_problems(content))
    if not content.strip():
        raise ValidationFailed([Problem("$.content", "must not be empty")])
    return message_append(
        conversation=conversation,
        message=NewMessage(role=Message.Role.SYSTEM, kind=Message.Kind.EVENT, content=content),
    )


def draft_edit_notice(draft: str) -> str:
    return f'[user edited the draft to: "{draft}"]'


def title_from_message(content: str) -> str:
    first_line = " ".join(content.split())
    if len(first_line) <= TITLE_FROM_MESSAGE_CHARS:
        return first_line
    return first_line[: TITLE_FROM_MESSAGE_CHARS - 1].rstrip() + "…"


# --- draft ---------------------------------------------------------------------------


def conversation_draft_update(
    *, conversation: Conversation, draft: str, by_user: bool = True
) -> bool:
    """Set the draft; return whether it changed.

    A change by the user raises `draft_edited` so the next turn tells the model; a change
    by the assistant (its `update_draft` tool) clears it, since the model wrote it.
    Saving an unchanged draft is a no-op and injects nothing.
    """
    _raise_if(validation.draft_problems(draft))
    with transaction.atomic():
        locked = _locked(conversation)
        if locked.draft == draft:
            return False
        now = timezone.now()
        Conversation.objects.filter(pk=conversation.pk).update(
            draft=draft, draft_edited=by_user, updated_at=now
        )
    conversation.draft = draft
    conversation.draft_edited = by_user
    conversation.updated_at = now
    return True


# --- fork and import -------------------------------------------------------------------


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
    _raise_if(_fork_split_problems(conversation=conversation, at_seq=at_seq))

    source = (
        Message.objects.filter(conversation=conversation, seq__lte=at_seq)
        .order_by("seq")
        .values_list(
            "seq",
            "role",
            "kind",
            "content",
            "tool_calls",
            "tool_call_id",
            "name",
            "usage",
            "created_at",
            "provider_payload",
        )
    )
    with transaction.atomic():
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
            Message(
                conversation=fork,
                seq=seq,
                role=role,
                kind=kind,
                content=content,
                tool_calls=tool_calls,
                tool_call_id=tool_call_id,
                name=name,
                usage=usage,
                created_at=created_at,
                provider_payload=provider_payload,
            )
            for (
                seq,
                role,
                kind,
                content,
                tool_calls,
                tool_call_id,
                name,
                usage,
                created_at,
                provider_payload,
            ) in source.iterator(chunk_size=BULK_BATCH)
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
    answered = set(
        Message.objects.filter(
            conversation=conversation,
            seq__gt=last_assistant.seq,
            seq__lte=at_seq,
            role=Message.Role.TOOL,
        ).values_list("tool_call_id", flat=True)
    )
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
    """Store an exported conversation (JSON v1) for `owner`: everything or nothing.

    Raises ValidationFailed listing every problem, each with its JSON path.
    """
    parsed = parse_export(document)
    data = parsed.conversation
    with transaction.atomic():
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
        )
        _bulk_insert(
            Message(
                conversation=conversation,
                seq=m.seq,
                role=m.role,
                kind=m.kind,
                content=m.content,
                tool_calls=[call.model_dump() for call in m.tool_calls],
                tool_call_id=m.tool_call_id or "",
                name=m.name or "",
                usage=m.usage,
                created_at=m.created_at,
                provider_payload=m.provider_payload,
            )
            for m in parsed.messages
        )
        audit_record(actor=owner, action=AuditEvent.Action.IMPORTED, conversation=conversation)
    return conversation


# --- audit ---------------------------------------------------------------------------


def audit_record(
    *, actor: User | None, action: str, conversation: Conversation, reason: str = ""
) -> AuditEvent:
    return AuditEvent.objects.create(
        actor=actor,
        actor_username=actor.get_username() if actor else "",
        action=action,
        conversation_id=conversation.pk,
        owner_id=conversation.owner_id,
        reason=reason,
    )
