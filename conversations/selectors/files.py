"""Reads of uploaded files: always the requesting user's own (another user's file, or a
malformed id, does not exist)."""

from uuid import UUID

from django.db.models import Q

from accounts.models import User
from conversations.models import StoredFile
from conversations.selectors.conversations import Page, _clamp
from conversations.selectors.cursors import cursor_decode, cursor_encode


def file_get(*, user: User, file_id: UUID | str) -> StoredFile:
    """The user's file, or StoredFile.DoesNotExist (a 404)."""
    try:
        key = UUID(str(file_id))
    except ValueError:
        raise StoredFile.DoesNotExist from None
    return StoredFile.objects.get(pk=key, owner=user)


def file_list(*, user: User, cursor: str | None = None, limit: int = 50) -> Page[StoredFile]:
    """The user's files, newest first, keyset-paginated on (created_at, id)."""
    limit = _clamp(limit)
    rows = StoredFile.objects.filter(owner=user)
    position = cursor_decode(cursor) if cursor else None
    if position is not None:
        when, key = position
        rows = rows.filter(Q(created_at__lt=when) | Q(created_at=when, id__lt=key))
    found = list(rows.order_by("-created_at", "-id")[: limit + 1])
    items = found[:limit]
    next_cursor = None
    if len(found) > limit:
        last = items[-1]
        next_cursor = cursor_encode([last.created_at.isoformat(), str(last.id)])
    return Page(items=items, next_cursor=next_cursor)
