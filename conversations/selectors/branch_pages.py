"""A conversation's branches a page at a time: the root first, then oldest first.

Keyset-paginated on (created_at, id), like the conversation list, so the hundredth page
of a conversation with thousands of branches costs what the first does, and a page never
shifts while branches are added (a new branch is always the newest).
"""

from typing import Any

from django.db.models import Q

from conversations.models import Branch, Conversation
from conversations.selectors.branches import BRANCH_FIELDS
from conversations.selectors.cursors import MAX_PAGE, Page, cursor_decode, cursor_encode

# The cursor after the root branch: the other branches follow from their oldest.
_AFTER_ROOT: list[Any] = []


def branch_page(
    *, conversation: Conversation, cursor: str | None = None, limit: int = 50
) -> Page[dict[str, Any]]:
    """Branches as BRANCH_FIELDS rows (`message_count` is the length of the branch's
    path): the root first, then the others by creation. At most two indexed reads."""
    limit = max(1, min(int(limit), MAX_PAGE))
    rows: list[dict[str, Any]] = []
    children = Branch.objects.filter(conversation=conversation, parent__isnull=False)
    if cursor:
        after = cursor_decode(cursor)
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
        next_cursor = cursor_encode(position)
    return Page(items=items, next_cursor=next_cursor)
