"""The records kept beside conversations: the audit trail of privileged access, the
daily message counters behind the quota, and the usage rollup the dashboard reads.

Models of the conversations app (conversations/models.py imports them), in their own
module for size.
"""

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


class DailyMessageCount(models.Model):
    """User messages sent per user per UTC day, kept while a daily quota is configured.

    A counter row rather than a COUNT over messages: the quota is checked on every send,
    and counting a busy user's day of messages joined through their conversations would
    cost more each time. The row lock taken by the increment also serialises one user's
    concurrent sends, so two of them cannot both pass the last free slot.
    """

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    day = models.DateField()
    messages = models.PositiveIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["user", "day"], name="daily_message_count_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.user_id} {self.day}: {self.messages}"


class UsageDay(models.Model):
    """One conversation's own usage on one UTC day: the rows the usage dashboard adds up.

    Kept current in the transaction that stores the messages (services/usage.py), so the
    dashboard reads a few rows per conversation and day instead of every message. One row
    per conversation rather than per user, so "conversations active" over a range stays a
    count of distinct conversations. Copies (imports, forks) never count: they were spent
    elsewhere.

    The dashboard reports spend that happened, so deleting what caused it does not take it
    back: the conversation is a plain id (no foreign key: its deletion leaves the row), and
    a deleted account's rows lose their owner but keep counting in the daily totals.
    """

    day = models.DateField()
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    conversation_id = models.UUIDField()
    messages = models.PositiveIntegerField(default=0)
    user_messages = models.PositiveIntegerField(default=0)
    # The providers' reported counts, each kept apart: prompt and completion tokens are
    # priced differently, and once a conversation is deleted the split cannot be read back.
    prompt_tokens = models.BigIntegerField(default=0)
    completion_tokens = models.BigIntegerField(default=0)
    total_tokens = models.BigIntegerField(default=0)

    class Meta:
        constraints = [
            # Also the index the dashboard's date range reads.
            models.UniqueConstraint(fields=["day", "conversation_id"], name="usage_day_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.day} {self.conversation_id}: {self.messages}"
