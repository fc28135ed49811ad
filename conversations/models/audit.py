"""The audit trail of privileged access: who read, exported, flagged, deleted, imported or
purged which conversation, kept as plain values that outlive the rows they name."""

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone


class AuditAction(models.TextChoices):
    VIEWED = "viewed"
    EXPORTED = "exported"
    DELETED = "deleted"
    FLAGGED = "flagged"
    UNFLAGGED = "unflagged"
    IMPORTED = "imported"
    PURGED = "purged"
    # A tool server registered, changed or removed (its name in `reason`, never a secret).
    SERVER_ADDED = "server_added"
    SERVER_CHANGED = "server_changed"
    SERVER_DELETED = "server_deleted"
    # A share link made or revoked by staff (the share's id and audience in `reason`).
    SHARE_CREATED = "share_created"
    SHARE_REVOKED = "share_revoked"


class AuditEvent(models.Model):
    """Append-only record of privileged access. Plain ids so it outlives what it describes."""

    Action = AuditAction

    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    actor_username = models.CharField(max_length=150, blank=True)
    action = models.CharField(max_length=16, choices=AuditAction.choices)
    conversation_id = models.UUIDField(null=True, blank=True, db_index=True)
    owner_id = models.BigIntegerField(null=True, blank=True)
    reason = models.TextField(blank=True)
    at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        ordering = ["-at"]
        constraints = [
            models.CheckConstraint(
                condition=Q(action__in=AuditAction.values), name="audit_action_valid"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.actor_username} {self.action} {self.conversation_id}"
