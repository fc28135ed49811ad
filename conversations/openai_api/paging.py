"""Items found by id and paged along the conversation's active path.

Every message gives at least one item (objects.message_items), so `limit + 1` messages
from the cursor hold more than a page: a page is one bounded range read whatever the
conversation's length, and `after` (an item id) pins the page to that item's place, so
pages never shift while items are added.
"""

from dataclasses import dataclass

from conversations import selectors
from conversations.errors import NotFound
from conversations.models import Branch, Conversation, Message
from conversations.openai_api.errors import invalid, quoted
from conversations.openai_api.ids import ItemRef, item_ref
from conversations.openai_api.objects import Item, message_items, rows_with_files


@dataclass(frozen=True)
class FoundItem:
    branch: Branch
    message: Message
    item: Item


def item_find(*, conversation: Conversation, raw_id: str) -> FoundItem:
    """The item with this id on the conversation's active path; a 404 for an unknown or
    malformed id, another conversation's, or one on a path no longer shown."""
    ref = item_ref(raw_id)
    found = _lookup(conversation, ref) if ref is not None else None
    if found is None:
        raise NotFound(f"Item with id '{quoted(raw_id)}' not found.")
    return found


def _lookup(conversation: Conversation, ref: ItemRef) -> FoundItem | None:
    try:
        branch, message = selectors.path_message_get(
            conversation=conversation, message_id=ref.message_id
        )
    except Message.DoesNotExist:
        return None
    row = rows_with_files([selectors.message_row(message)])[0]
    for item in message_items(row, owner_id=conversation.owner_id):
        if item.ref == ref:
            return FoundItem(branch, message, item)
    return None


def items_page(
    *, conversation: Conversation, after: str | None, limit: int, order: str
) -> tuple[list[Item], bool]:
    """Up to `limit` items after the item `after` (from the start for None) in `order`
    ("asc": oldest first; "desc": newest first), and whether more follow."""
    if after is None:
        branch = selectors.branch_active(conversation=conversation)
        cursor = None
    else:
        try:
            found = item_find(conversation=conversation, raw_id=after)
        except NotFound:
            raise invalid(
                f"Invalid 'after': no item with id '{quoted(after)}' in this conversation.",
                param="after",
            ) from None
        branch, cursor = found.branch, found.item.position
    end, owner = branch.message_count, conversation.owner_id
    if order == "asc":
        start = cursor[0] if cursor else 1
        rows = rows_with_files(
            selectors.path_rows(branch=branch, after=start - 1, last=start + limit)
        )
        items = [item for row in rows for item in message_items(row, owner_id=owner)]
        if cursor:
            items = [item for item in items if item.position > cursor]
        beyond = bool(rows) and rows[-1]["seq"] < end
    else:
        start = cursor[0] if cursor else end
        rows = rows_with_files(
            selectors.path_rows(branch=branch, after=start - limit - 1, last=start)
        )
        items = [
            item for row in reversed(rows) for item in reversed(message_items(row, owner_id=owner))
        ]
        if cursor:
            items = [item for item in items if item.position < cursor]
        beyond = bool(rows) and rows[0]["seq"] > 1
    return items[:limit], len(items) > limit or beyond
