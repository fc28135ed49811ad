"""Conversation notifications: what a second tab needs to stay in sync.

Sent to the Channels group `conversation.<id>` after the transaction commits (a rolled
back change is never announced); deletions go to the owner's group instead, one message
for many conversations. Notifications made within `batched()` (starting a run: the
message stored, the title, the branch, the run) travel as one channel-layer message per
conversation, which each socket relays as the same frames, in the same order, as if they
had been sent one by one. Delivery is best effort: a tab that missed one reloads
state over the API, so a broken channel layer is logged, never raised into a write.
"""

import asyncio
import logging
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from functools import partial
from typing import Any
from uuid import UUID

from asgiref.sync import SyncToAsync
from channels.layers import get_channel_layer
from django.db import transaction

from accounts.sockets import user_sockets_group
from conversations.background_loop import loop_submit

log = logging.getLogger(__name__)
SEND_TIMEOUT = 5.0

# Notification types (run events have their own, in events.py).
MESSAGE_STORED = "conversation.message"
RUN_STARTED = "conversation.run_started"
RUN_ENDED = "conversation.run_ended"
UPDATED = "conversation.updated"
BRANCH_CREATED = "conversation.branch_created"
DRAFT_CHANGED = "conversation.draft_updated"
# What a socket on a deleted conversation tells its client (see deleted_notify).
DELETED = "conversation.deleted"
# What every socket of the owner hears of a deletion: the ids of the conversations gone.
MANY_DELETED = "conversations.deleted"
# What every socket of the owner hears when a conversation's pin, folder or tags change,
# and when their folders do (the whole list): every tab's sidebar follows.
ORGANISED = "conversation.organised"
FOLDERS_CHANGED = "folders.changed"


def group_name(conversation_id: UUID | str) -> str:
    return f"conversation.{conversation_id}"


# The notifications gathered by the innermost `batched()` block of this thread (or task).
_batch: ContextVar[list[tuple[str, dict[str, Any]]] | None] = ContextVar(
    "notifications_batch", default=None
)


def notify(conversation_id: UUID | str, kind: str, **payload: Any) -> None:
    """Announce `kind` to the conversation's sockets once the current transaction commits."""
    body = {"type": kind, "conversation_id": str(conversation_id), **payload}
    group = group_name(conversation_id)
    gathered = _batch.get()
    if gathered is not None:
        gathered.append((group, body))
        return
    transaction.on_commit(lambda: _send(group, [body]))


@contextmanager
def batched() -> Iterator[None]:
    """Gather the notifications made inside the block and, when it ends without an error,
    send them after commit as one channel-layer message per conversation (each group
    send is a Redis publish and a wake-up of every web process subscribed to it).

    Use it inside the transaction that makes the changes and around nothing that rolls
    back a savepoint and carries on: the block's own error drops everything gathered,
    as a rollback drops an `on_commit` callback.
    """
    gathered: list[tuple[str, dict[str, Any]]] = []
    token = _batch.set(gathered)
    try:
        yield
    finally:
        _batch.reset(token)
    by_group: dict[str, list[dict[str, Any]]] = {}
    for group, body in gathered:
        by_group.setdefault(group, []).append(body)
    for group, bodies in by_group.items():
        transaction.on_commit(partial(_send, group, bodies))


def deleted_notify(owner_id: int, conversation_ids: Sequence[UUID | str]) -> None:
    """Announce, once the current transaction commits, that these conversations of one
    owner are gone: one message to the owner's sockets (every socket joins its user's
    group, accounts.sockets), not one per conversation, so a bulk delete of thousands
    sends a handful. Each socket picks out its own conversation from the list and closes;
    the others pass the list on, so every open tab can drop those conversations."""
    if not conversation_ids:
        return
    user_notify(owner_id, MANY_DELETED, conversation_ids=[str(pk) for pk in conversation_ids])


def user_notify(owner_id: int, kind: str, **payload: Any) -> None:
    """Announce `kind` to every socket of the owner (each joins its user's group,
    accounts.sockets) once the current transaction commits."""
    body = {"type": kind, **payload}
    transaction.on_commit(lambda: _send(user_sockets_group(owner_id), [body]))


def notification_bodies(message: dict[str, Any]) -> list[dict[str, Any]]:
    """The notifications one channel-layer message carries, in the order they were made."""
    bodies = message.get("bodies")
    return bodies if isinstance(bodies, list) else [message["body"]]


def _send(group: str, bodies: list[dict[str, Any]]) -> None:
    layer = get_channel_layer()
    if layer is None:
        return
    # `body` alone, as before, when there is one. With several, `body` still names the
    # last (a run started), so that a socket of a release that knows no `bodies` (during
    # a rolling deploy) at least follows the new run.
    message: dict[str, Any] = {"type": "conversation.notify", "body": bodies[-1]}
    if len(bodies) > 1:
        message["bodies"] = bodies
    try:
        loop = _server_loop()
        sending = layer.group_send(group, message)
        if loop is not None:
            # An async server's helper thread: its own event loop sends it, handed the
            # coroutine directly (async_to_sync cost ten times the CPU to do the same).
            asyncio.run_coroutine_threadsafe(sending, loop).result(timeout=SEND_TIMEOUT)
        else:
            # A plain thread (a worker's step, a command): async_to_sync would start a loop,
            # a thread and a Redis connection per notification (3-4 ms each); this
            # process's streaming loop keeps one connection open instead.
            loop_submit(sending).result(timeout=SEND_TIMEOUT)
    except Exception:
        kinds = ", ".join(str(body.get("type")) for body in bodies)
        log.warning("could not notify %s of %s", group, kinds, exc_info=True)


def _server_loop() -> asyncio.AbstractEventLoop | None:
    """The event loop this thread runs sync code for, if it is one of asgiref's helper
    threads (set by asgiref, and not inherited by a forked process)."""
    loop = getattr(SyncToAsync.threadlocal, "main_event_loop", None)
    if loop is None or getattr(SyncToAsync.threadlocal, "main_event_loop_pid", 0) != os.getpid():
        return None
    return loop if loop.is_running() else None
