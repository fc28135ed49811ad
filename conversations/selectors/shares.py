"""Share links: the share a token opens, a user's shares and a share's transcript."""

import hashlib
from typing import Any
from uuid import UUID

from django.db.models import Q, QuerySet
from django.utils import timezone

from conversations.models import Conversation, Share
from conversations.selectors.branches import path_messages
from conversations.serializers import MESSAGE_FIELDS


def share_token_hash(token: str) -> str:
    """The stored form of a share token."""
    return hashlib.sha256(token.encode()).hexdigest()


def share_get_by_token(*, token: str) -> Share:
    """The open share the token names, or Share.DoesNotExist: unknown, revoked and expired
    tokens alike, so a link tells nothing of why it is closed."""
    now = timezone.now()
    return Share.objects.select_related("conversation", "branch").get(
        Q(expires_at__isnull=True) | Q(expires_at__gt=now),
        token_hash=share_token_hash(token),
        revoked_at__isnull=True,
    )


def shares_for_user(*, user: Any, conversation: Conversation | None = None) -> QuerySet[Share]:
    """The user's shares (revoked and expired ones included: the owner sees them), newest
    first; of one conversation when given."""
    shares = Share.objects.filter(created_by=user, conversation__owner=user)
    if conversation is not None:
        shares = shares.filter(conversation=conversation)
    return shares.order_by("-created_at", "-id")


def share_get(*, user: Any, share_id: UUID | str) -> Share:
    """One of the user's shares, or Share.DoesNotExist (also for malformed ids)."""
    try:
        key = UUID(str(share_id))
    except ValueError:
        raise Share.DoesNotExist from None
    return shares_for_user(user=user).get(pk=key)


def share_rows(*, share: Share) -> list[dict[str, Any]]:
    """The snapshot's messages, 1..message_count of the path that was active, as
    MESSAGE_FIELDS rows."""
    if share.message_count == 0:
        return []
    rows = path_messages(share.branch, after=0, last=share.message_count)
    return list(rows.values(*MESSAGE_FIELDS))
