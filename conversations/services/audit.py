"""The audit trail of privileged access."""

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
