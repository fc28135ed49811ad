"""Share links: the share a token opens, a user's shares and a share's transcript."""

import hashlib
from typing import Any
from uuid import UUID

from django.db.models import Q, QuerySet
from django.utils import timezone

from conversations.models import Conversation, Message, Share
from conversations.selectors.attachments import (
    attachment_payloads_of,
    conversation_has_attachments,
)
from conversations.selectors.branches import path_querysets
from conversations.selectors.cursors import Page, cursor_decode, cursor_encode, page_limit
from conversations.serializers import MESSAGE_FIELDS


def share_token_hash(token: str) -> str:
    """The stored form of a share token."""
    return hashlib.sha256(token.encode()).hexdigest()


def shares_open(*, conversation: Conversation | None = None) -> QuerySet[Share]:
    """Shares neither revoked nor expired (of one conversation when given)."""
    shares = Share.objects.filter(
        Q(expires_at__isnull=True) | Q(expires_at__gt=timezone.now()), revoked_at__isnull=True
    )
    return shares if conversation is None else shares.filter(conversation=conversation)


SHARE_STATUSES = ("active", "expired", "revoked")


def share_status(share: Share) -> str:
    """What the link does now: opens (`active`), or no longer, `expired` or `revoked`
    (revoked first: revoking outlasts any expiry)."""
    if share.revoked_at is not None:
        return "revoked"
    if share.expires_at is not None and share.expires_at <= timezone.now():
        return "expired"
    return "active"


def shares_in_status(queryset: QuerySet[Share], status: str) -> QuerySet[Share]:
    """The shares of `queryset` in one of SHARE_STATUSES (as share_status says)."""
    if status == "active":
        return queryset & shares_open()
    if status == "expired":
        return queryset.filter(revoked_at__isnull=True, expires_at__lte=timezone.now())
    return queryset.filter(revoked_at__isnull=False)


def share_link_path(token: str) -> str:
    """Where a token opens its share: the page web/urls.py serves at `/s/<token>/`."""
    return f"/s/{token}/"


def share_get_by_token(*, token: str) -> Share:
    """The open share the token names, or Share.DoesNotExist: unknown, revoked and expired
    tokens alike, so a link tells nothing of why it is closed."""
    return (
        shares_open()
        .select_related("conversation", "branch")
        .get(token_hash=share_token_hash(token))
    )


def shares_for_user(*, user: Any, conversation: Conversation | None = None) -> QuerySet[Share]:
    """The user's shares (revoked and expired ones included: the owner sees them), newest
    first, their conversations read along; of one conversation when given."""
    shares = Share.objects.filter(created_by=user, conversation__owner=user).select_related(
        "conversation"
    )
    if conversation is not None:
        shares = shares.filter(conversation=conversation)
    return shares.order_by("-created_at", "-id")


def share_page(
    *,
    user: Any,
    conversation: Conversation | None = None,
    cursor: str | None = None,
    limit: int = 50,
) -> Page[Share]:
    """`shares_for_user` a page at a time, keyset-paginated on (created_at, id)."""
    limit = page_limit(limit)
    shares = shares_for_user(user=user, conversation=conversation)
    position = cursor_decode(cursor) if cursor else None
    if position is not None:
        when, key = position
        shares = shares.filter(Q(created_at__lt=when) | Q(created_at=when, id__lt=key))
    found = list(shares[: limit + 1])
    items = found[:limit]
    last = items[-1] if len(found) > limit else None
    following = cursor_encode([last.created_at.isoformat(), str(last.id)]) if last else None
    return Page(items=items, next_cursor=following)


def share_get(*, user: Any, share_id: UUID | str) -> Share:
    """One of the user's shares, or Share.DoesNotExist (also for malformed ids)."""
    try:
        key = UUID(str(share_id))
    except ValueError:
        raise Share.DoesNotExist from None
    return shares_for_user(user=user).get(pk=key)


def shown_to_readers(messages: QuerySet[Message]) -> QuerySet[Message]:
    """What a share link's reader sees of these messages. System messages stay out: they
    carry context meant for the model (the owner's draft edits, context events, their
    instructions, summaries of earlier turns), never part of the transcript."""
    return messages.exclude(role=Message.Role.SYSTEM)


def share_rows(*, share: Share) -> list[dict[str, Any]]:
    """The snapshot's messages, 1..message_count of the path that was active, as
    MESSAGE_FIELDS rows with their files (`attachments`): a query per SEGMENTS_PER_QUERY
    segments of the path, and for the files one to learn the conversation carries any
    and one per such query, however long the snapshot."""
    if share.message_count == 0:
        return []
    parts = [
        shown_to_readers(part)
        for part in path_querysets(share.branch, after=0, last=share.message_count)
    ]
    rows = [row for part in parts for row in part.values(*MESSAGE_FIELDS)]
    files: dict[UUID, list[dict[str, Any]]] = {}
    if conversation_has_attachments(conversation_id=share.conversation_id):
        for part in parts:
            files.update(attachment_payloads_of(messages=part))
    for row in rows:
        row["attachments"] = files.get(row["id"], [])
    return rows
