"""Quotas: conversations per user, and turns that make the model work per day (a message
sent or edited, a regeneration, a turn kept nowhere). 0 in a setting = unlimited.

Both checks run inside the caller's transaction, so a refused write stores nothing (the
counter increment is rolled back with it).
"""

from django.conf import settings
from django.db.models import F
from django.utils import timezone

from accounts.models import User
from conversations.errors import (
    CONVERSATION_QUOTA_EXCEEDED,
    MESSAGE_QUOTA_EXCEEDED,
    QuotaExceeded,
)
from conversations.models import Conversation, DailyMessageCount


def conversation_quota_check(*, owner_id: int) -> None:
    """Refuse a new conversation when the owner already has the maximum.

    Locks the owner's row first (inside the caller's transaction), so two concurrent
    creates cannot both take the last free slot.
    """
    limit = settings.PARLEY_MAX_CONVERSATIONS_PER_USER
    if limit <= 0:
        return
    User.objects.select_for_update().filter(pk=owner_id).values_list("pk").first()
    # Imports still storing theirs count too: each holds its place from its start.
    if Conversation.with_imports.filter(owner_id=owner_id).count() >= limit:
        raise QuotaExceeded(
            CONVERSATION_QUOTA_EXCEEDED,
            f"You have reached the limit of {limit} conversations; delete one to start another.",
        )


def message_quota_take(*, user_id: int) -> None:
    """Count one turn against today's quota, or refuse it when the quota is used up.

    Must run inside a transaction: on refusal the caller's rollback undoes the increment.
    """
    limit = settings.PARLEY_MAX_MESSAGES_PER_DAY
    if limit <= 0:
        return
    day = timezone.now().date()
    # Get-or-create then a conditional increment: the UPDATE takes the row lock, so
    # concurrent sends of one user queue here and see each other's counts.
    DailyMessageCount.objects.get_or_create(user_id=user_id, day=day)
    taken = DailyMessageCount.objects.filter(user_id=user_id, day=day, messages__lt=limit).update(
        messages=F("messages") + 1
    )
    if not taken:
        raise QuotaExceeded(
            MESSAGE_QUOTA_EXCEEDED,
            f"You have sent the maximum of {limit} messages for today; the limit resets at "
            "midnight UTC.",
        )
