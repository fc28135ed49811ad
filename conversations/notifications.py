"""Conversation notifications: what a second tab needs to stay in sync.

Sent to the Channels group `conversation.<id>` after the transaction commits (a rolled
back change is never announced). Delivery is best effort: a tab that missed one reloads
state over the API, so a broken channel layer is logged, never raised into a write.
"""

import logging
import os
from typing import Any
from uuid import UUID

from asgiref.sync import SyncToAsync, async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction

from conversations.background_loop import loop_submit

log = logging.getLogger(__name__)
SEND_TIMEOUT = 5.0

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
    message = {"type": "conversation.notify", "body": body}
    try:
        if _inside_sync_to_async():
            # An async server's helper thread: its own event loop sends it.
            async_to_sync(layer.group_send)(group, message)
        else:
            # A plain thread (a worker's step, a command): async_to_sync would start a loop,
            # a thread and a Redis connection per notification (3-4 ms each); this
            # process's streaming loop keeps one connection open instead.
            loop_submit(layer.group_send(group, message)).result(timeout=SEND_TIMEOUT)
    except Exception:
        log.warning("could not notify %s of %s", group, body.get("type"), exc_info=True)


def _inside_sync_to_async() -> bool:
    # Set by asgiref for the threads that run sync code on behalf of an event loop.
    loop = getattr(SyncToAsync.threadlocal, "main_event_loop", None)
    return loop is not None and getattr(SyncToAsync.threadlocal, "main_event_loop_pid", 0) == (
        os.getpid()
    )
