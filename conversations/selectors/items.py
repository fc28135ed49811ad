"""Reads of the stored messages along a conversation's active path, as the
OpenAI-compatible API pages them as items: bounded range reads, like every path read."""

from typing import Any
from uuid import UUID

from conversations.models import Branch, Conversation, Message
from conversations.selectors.branches import branch_active, path_messages, segment_owning

# What turning a message into items needs (the rest of a message stays out of the read).
ITEM_FIELDS = ("id", "seq", "role", "kind", "content", "tool_calls", "tool_call_id", "name")


def path_rows(*, branch: Branch, after: int, last: int) -> list[dict[str, Any]]:
    """The messages of the branch's path with after < seq <= last, in seq order, as
    ITEM_FIELDS rows."""
    last = min(last, branch.message_count)
    if last <= after:
        return []
    return list(path_messages(branch, after=max(0, after), last=last).values(*ITEM_FIELDS))


def path_message_get(*, conversation: Conversation, message_id: UUID) -> tuple[Branch, Message]:
    """The active branch and one message on its path, or Message.DoesNotExist: a message
    of another conversation, or one left on a branch the conversation no longer shows."""
    branch = branch_active(conversation=conversation)
    message = Message.objects.filter(pk=message_id, conversation=conversation).first()
    if (
        message is None
        or message.seq > branch.message_count
        or segment_owning(branch, message.seq).branch_id != message.branch_id
    ):
        raise Message.DoesNotExist
    return branch, message


def message_row(message: Message) -> dict[str, Any]:
    """A message as the ITEM_FIELDS row `path_rows` gives."""
    return {name: getattr(message, name) for name in ITEM_FIELDS}
