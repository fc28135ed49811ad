"""The daily counters: messages per user and day behind the daily quota, and each
conversation's usage per day that the usage dashboard adds up."""

from django.conf import settings
from django.db import models


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
