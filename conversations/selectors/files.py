"""Reads of uploaded files: always the requesting user's own (another user's file, or a
malformed id, does not exist)."""

from collections.abc import Iterable
from uuid import UUID

from django.db.models import Q

from accounts.models import User
from conversations.models import StoredFile
from conversations.selectors.cursors import Page, cursor_decode, cursor_encode, page_limit


def file_get(*, user: User, file_id: UUID | str) -> StoredFile:
    """The user's file, or StoredFile.DoesNotExist (a 404)."""
    try:
        key = UUID(str(file_id))
    except ValueError:
        raise StoredFile.DoesNotExist from None
    return StoredFile.objects.get(pk=key, owner=user)


def files_by_id(*, user: User, file_ids: Iterable[UUID]) -> dict[UUID, StoredFile]:
    """Those of these files that are the user's, by id, in one query (another user's, or
    an unknown id, is left out)."""
    keys = set(file_ids)
    if not keys:
        return {}
    return {row.pk: row for row in StoredFile.objects.filter(owner=user, pk__in=keys)}


def file_list(
    *, user: User, cursor: str | None = None, limit: int = 50, oldest_first: bool = False
) -> Page[StoredFile]:
    """The user's files, newest first (or oldest first), keyset-paginated on
    (created_at, id)."""
    limit = page_limit(limit)
    rows = StoredFile.objects.filter(owner=user)
    position = cursor_decode(cursor) if cursor else None
    if position is not None:
        when, key = position
        rows = rows.filter(
            Q(created_at__gt=when) | Q(created_at=when, id__gt=key)
            if oldest_first
            else Q(created_at__lt=when) | Q(created_at=when, id__lt=key)
        )
    order = ("created_at", "id") if oldest_first else ("-created_at", "-id")
    found = list(rows.order_by(*order)[: limit + 1])
    items = found[:limit]
    next_cursor = file_cursor(items[-1]) if len(found) > limit else None
    return Page(items=items, next_cursor=next_cursor)


def file_cursor(file: StoredFile) -> str:
    """The cursor of the page that goes on after `file`."""
    return cursor_encode([file.created_at.isoformat(), str(file.id)])
