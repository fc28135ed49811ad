"""A conversation's branches a page at a time: the root first, then oldest first.

Keyset-paginated on (created_at, id), like the conversation list, so the hundredth page
of a conversation with thousands of branches costs what the first does, and a page never
shifts while branches are added (a new branch is always the newest).
"""

import base64
import binascii
import json
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

from django.db.models import Q

from conversations.errors import Problem, ValidationFailed
from conversations.json_input import json_parse
from conversations.models import Branch, Conversation
from conversations.selectors.branches import BRANCH_FIELDS
from conversations.selectors.conversations import MAX_PAGE, Page

# The cursor after the root branch: the other branches follow from their oldest.
_AFTER_ROOT: list[Any] = []


def _encode(position: list[Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(position).encode()).decode().rstrip("=")


def _decode(cursor: str) -> tuple[datetime, UUID] | None:
    """(created_at, id) of the last branch a page showed; None right after the root."""
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        position = json_parse(base64.urlsafe_b64decode(padded), max_depth=2)
        if position == _AFTER_ROOT:
            return None
        stamp, key = position
        when = datetime.fromisoformat(stamp)
        if when.tzinfo is None or not isinstance(key, str):
            raise ValueError("naive time or no id")
        # In UTC here: a time at the edge of the calendar would overflow in the query.
        return when.astimezone(UTC), UUID(key)
    except (ValueError, TypeError, OverflowError, binascii.Error):
        raise ValidationFailed([Problem("$.cursor", "is not a valid page cursor")]) from None


def branch_page(
    *, conversation: Conversation, cursor: str | None = None, limit: int = 50
) -> Page[dict[str, Any]]:
    """Branches as BRANCH_FIELDS rows (`message_count` is the length of the branch's
    path): the root first, then the others by creation. At most two indexed reads."""
    limit = max(1, min(int(limit), MAX_PAGE))
    rows: list[dict[str, Any]] = []
    children = Branch.objects.filter(conversation=conversation, parent__isnull=False)
    if cursor:
        after = _decode(cursor)
        if after is not None:
            when, key = after
            children = children.filter(Q(created_at__gt=when) | Q(created_at=when, id__gt=key))
    else:
        rows += Branch.objects.filter(conversation=conversation, parent__isnull=True).values(
            *BRANCH_FIELDS
        )
    wanted = limit + 1 - len(rows)
    rows += children.order_by("created_at", "id").values(*BRANCH_FIELDS)[:wanted]
    more = len(rows) > limit
    items = rows[:limit]
    next_cursor = None
    if more:
        last = items[-1]
        position = (
            _AFTER_ROOT
            if last["parent_id"] is None
            else [last["created_at"].isoformat(), str(last["id"])]
        )
        next_cursor = _encode(position)
    return Page(items=items, next_cursor=next_cursor)
