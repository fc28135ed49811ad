"""Conversation notifications: what a second tab needs to stay in sync.

Sent to the Channels group `conversation.<id>` after the transaction commits (a rolled
back change is never announced). Delivery is best effort: a tab that missed one reloads
state over the API, so a broken channel layer is logged, never raised into a write.
"""

import logging
from typing import Any
from uuid import UUID

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction

log = logging.getLogger(__name__)

# Notification types (run events have their own, in events.py).
MESSAGE_STORED = "conversation.message"
RUN_STARTED = "conversation.run_started"
RUN_ENDED = "conversation.run_ended"
UPDATED = "conversation.updated"
DRAFT_CHANGED = "conversation.draft_updated"
DELETED = "conversation.deleted"


def group_name(conversation_id: UUID | str) -> str:
    return f"conversation.{conversation_id}"


def notify(conversation_id: UUID | str, kind: str, **payload: Any) -> None:
    """Announce `kind` to the conversation's sockets once the current transaction commits."""
    body = {"type": kind, "conversation_id": str(conversation_id), **payload}
    transaction.on_commit(lambda: _send(group_name(conversation_id), body))


def _send(group: str, body: dict[str, Any]) -> None:
    layer = get_channel_layer()
    if layer is None:
        return
    try:
        async_to_sync(layer.group_send)(group, {"type": "conversation.notify", "body": body})
    except Exception:
        log.warning("could not notify %s of %s", group, body.get("type"), exc_info=True)
