"""The audit trail of privileged access."""

from collections.abc import Iterable
from uuid import UUID

from accounts.models import User
from conversations.models import AuditEvent, Conversation


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


def audit_search_record(*, actor: User, reason: str) -> AuditEvent:
    """A text search or text filter over many conversations: which ones it reads is not
    known in advance, so the event names none."""
    return AuditEvent.objects.create(
        actor=actor,
        actor_username=actor.get_username(),
        action=AuditEvent.Action.VIEWED,
        reason=reason,
    )


def audit_record_many(
    *,
    actor: User | None,
    action: str,
    conversations: Iterable[tuple[UUID, int]],
    reason: str = "",
) -> int:
    """One event per `(conversation id, owner id)`, in one INSERT: used by the bulk actions,
    which never load whole conversations just to write their trail."""
    return audit_record_each(
        actor=actor,
        action=action,
        rows=((conversation_id, owner_id, reason) for conversation_id, owner_id in conversations),
    )


def audit_record_each(
    *, actor: User | None, action: str, rows: Iterable[tuple[UUID, int, str]]
) -> int:
    """One event per `(conversation id, owner id, reason)`, in one INSERT."""
    username = actor.get_username() if actor else ""
    events = [
        AuditEvent(
            actor=actor,
            actor_username=username,
            action=action,
            conversation_id=conversation_id,
            owner_id=owner_id,
            reason=reason,
        )
        for conversation_id, owner_id, reason in rows
    ]
    AuditEvent.objects.bulk_create(events)
    return len(events)
