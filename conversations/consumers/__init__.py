"""The conversation websocket: `/ws/conversations/<id>/`.

Client frames (handled in frames.py): message.create, message.regenerate, message.edit,
branch.switch, run.cancel, subscribe, draft.update, ping. A client that
lost its connection reconnects with `?run_id=<id>&after=<n>` to receive exactly the events
after n (no replay from the start, no frame to race). The server sends
run events (replayed from the run's log, then live, with one cursor), conversation
notifications for the other tabs, and `error` frames for bad input (the socket stays
open). Runs are followed with eventlog.run_follow: a Redis hiccup is retried from the last
event sent, so the reply carries on without a gap, and a lasting one ends in a
`stream_unavailable` error frame naming where to resume. A socket follows the credential
that opened it: when the key is revoked, the user deactivated or the session ended, it
closes with 4401 (accounts.sockets). A key without the `read` scope is told
`insufficient_scope` and closed with 4403; each frame needs its own scope (frames.py).
Business rules live in services and selectors; this class only translates.
"""

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import parse_qs
from uuid import UUID

from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.conf import settings

from accounts.sockets import (
    SocketCredential,
    socket_credential_seconds_left,
    socket_credential_valid,
    user_sockets_group,
)
from accounts.websocket import scope_credential
from config.async_db import db_call
from conversations import metrics, notifications, selectors
from conversations.consumers.frames import (
    SELF_CHECKED,
    CredentialEnded,
    Frame,
    FrameHandlers,
    connect_refusal,
    error_frame,
)
from conversations.engine import eventlog
from conversations.errors import (
    EVENTS_EXPIRED,
    INVALID_JSON,
    REQUEST_TOO_LARGE,
    STREAM_UNAVAILABLE,
    NotFound,
    ParleyError,
    Problem,
    ValidationFailed,
    error_from,
)
from conversations.json_input import JsonInputError, json_parse
from conversations.models import Conversation, Run

log = logging.getLogger(__name__)

CLOSE_UNAUTHENTICATED = 4401
CLOSE_FORBIDDEN = 4403
CLOSE_NOT_FOUND = 4404


class ConversationConsumer(FrameHandlers, AsyncJsonWebsocketConsumer):
    conversation: Conversation | None = None
    follower: asyncio.Task[None] | None = None
    following: str | None = None
    credential: SocketCredential | None = None
    credential_watch: asyncio.Task[None] | None = None
    closed_unauthenticated = False

    # --- connection ------------------------------------------------------------------

    async def connect(self) -> None:
        # Accept first: close codes (4401/4404) only exist on an open socket.
        await self.accept()
        metrics.websocket_opened()  # every accepted socket gets its disconnect() below
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=CLOSE_UNAUTHENTICATED)
            return
        refusal = connect_refusal(scope_credential(self.scope))
        if refusal is not None:  # a key without `read`: told why, before any lookup
            await self._send_error(refusal)
            await self.close(code=CLOSE_FORBIDDEN)
            return
        conversation_id = self.scope["url_route"]["kwargs"]["conversation_id"]
        self.conversation = await _conversation_get(user, conversation_id)
        if self.conversation is None:
            await self.close(code=CLOSE_NOT_FOUND)
            return
        self.group = notifications.group_name(self.conversation.pk)
        await self.channel_layer.group_add(self.group, self.channel_name)
        # Follow the credential: its revocation closes this socket (accounts.sockets).
        self.credential = scope_credential(self.scope)
        self.user_group = user_sockets_group(user.pk)
        await self.channel_layer.group_add(self.user_group, self.channel_name)
        # Checked again once in the group: a revocation between the handshake's
        # authentication and joining the group sent its notice to nobody.
        seconds_left = await _credential_seconds_left(self.credential)
        if seconds_left is None:
            await self._close_unauthenticated()
            return
        self.credential_watch = asyncio.create_task(self._watch_credential(seconds_left))
        active = await _active_run(self.conversation)
        await self.send_json(
            {
                "type": "conversation.connected",
                "conversation_id": str(self.conversation.pk),
                "active_run_id": str(active.pk) if active else None,
            }
        )
        resume = _resume_point(self.scope)
        if resume is not None:
            # A client picking up where its last connection stopped: exactly what follows.
            run_id, after = resume
            try:
                await self._follow_stored(run_id, after=after)
            except ParleyError as exc:
                await self._send_error(exc)
        elif active is not None:
            # A reload mid-reply: the whole reply so far, then the rest live.
            self._follow(str(active.pk), after=None)

    async def disconnect(self, code: int) -> None:
        metrics.websocket_closed()
        if self.credential_watch is not None:
            self.credential_watch.cancel()
        await self._unfollow()
        if self.conversation is not None:
            await self.channel_layer.group_discard(self.group, self.channel_name)
            await self.channel_layer.group_discard(self.user_group, self.channel_name)

    # --- client frames ---------------------------------------------------------------

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        try:
            frame = self._parse(text_data, bytes_data)
            handler = self._handlers().get(frame["type"])
            if handler is None:
                known = ", ".join(self._handlers())
                raise ValidationFailed(
                    [Problem("$.type", f"unknown frame type; use one of: {known}")]
                )
            handler = self._limited(handler)  # the request budgets, as on the API's doors
            # A notice of revocation may be lost: every frame checks the credential
            # itself first (those in SELF_CHECKED in their own database call).
            if frame["type"] not in SELF_CHECKED:
                if not await _credential_valid(self.credential):
                    await self._close_unauthenticated()
                    return
                await handler(frame)
            else:
                await self._self_checked(handler, frame)
        except CredentialEnded:
            await self._close_unauthenticated()
        except Exception as exc:
            # A refusal (the domain's, or a lookup that found nothing) is told on the
            # socket, which stays open; anything else is a bug for Channels to report.
            error = error_from(exc)
            if error is None:
                raise
            await self._send_error(error)

    async def _self_checked(
        self, handler: Callable[[Frame], Awaitable[None]], frame: Frame
    ) -> None:
        try:
            await handler(frame)
        except Exception as exc:
            # Refused (a malformed field, a conflict) where the credential may not have
            # been checked yet: a socket whose credential ended is closed rather than told
            # why, as for every other frame.
            if error_from(exc) is None:
                raise
            if not await _credential_valid(self.credential):
                raise CredentialEnded from None
            raise

    async def _send_error(self, error: ParleyError) -> None:
        await self.send_json(error_frame(error))

    def _parse(self, text_data: str | None, bytes_data: bytes | None) -> Frame:
        if text_data is None:
            raise ValidationFailed(error=INVALID_JSON, message="Send JSON as text frames.")
        if len(text_data.encode()) > settings.PARLEY_WS_MAX_FRAME_BYTES:
            limit = settings.PARLEY_WS_MAX_FRAME_BYTES
            raise ParleyError(REQUEST_TOO_LARGE, f"Frames are limited to {limit} bytes.")
        try:
            frame = json_parse(text_data)
        except JsonInputError as exc:
            raise ValidationFailed(
                [Problem(exc.path, exc.message)],
                INVALID_JSON,
                message=f"The frame is not acceptable JSON: {exc}.",
            ) from None
        if not isinstance(frame, dict):
            raise ValidationFailed([Problem("$", "must be a JSON object")])
        if not isinstance(frame.get("type"), str):
            raise ValidationFailed([Problem("$.type", "must be a string")])
        return frame

    # --- following a run's event log ---------------------------------------------------

    async def _follow_stored(self, run_id: str, *, after: int | None) -> None:
        """Follow a run the client named, once it is known to be this conversation's and
        its log is still there to read."""
        assert self.conversation is not None
        run = await _run_get(self.conversation, run_id)
        if run is None:
            raise NotFound("No such run in this conversation.")
        # An ended run's log expires after a while; without this check the client would
        # wait for events that never come. An active run's log may not exist yet (not
        # announced), and its worker writes it soon.
        if not run.is_active and not await eventlog.aevent_log_exists(run_id):
            raise ParleyError(EVENTS_EXPIRED)
        self._follow(run_id, after=after)

    def _follow(self, run_id: str, *, after: int | None) -> None:
        if self.follower is not None:
            self.follower.cancel()
        self.following = run_id
        self.follower = asyncio.create_task(self._relay(run_id, after))

    async def _unfollow(self) -> None:
        follower, self.follower = self.follower, None
        if follower is None:
            return
        follower.cancel()
        try:
            await follower
        except asyncio.CancelledError:
            # The follower's own end is expected; this socket's task being stopped too (a
            # closing connection) must go on stopping, not be taken for the follower's.
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise
        except Exception:
            log.exception("following a run ended in error")

    async def _relay(self, run_id: str, after: int | None) -> None:
        try:
            # Closed at once when the socket stops following, leaving the shared read.
            async with contextlib.aclosing(eventlog.run_follow(run_id, after=after)) as items:
                async for item in items:
                    if isinstance(item, eventlog.StreamLost):
                        after = item.after
                        break
                    if isinstance(item, dict):  # no keep-alives asked: Daphne pings sockets
                        await self.send_json(item)
                        after = item["sequence_number"]
                else:
                    return
        except Exception:
            log.exception("relaying run %s failed", run_id)
        await self._send_error(
            ParleyError(STREAM_UNAVAILABLE, details={"run_id": run_id, "after": after})
        )

    # --- credential notices (channel layer, accounts.sockets) ----------------------------

    async def auth_recheck(self, message: dict[str, Any]) -> None:
        if self.credential is None:
            return
        ended = message.get("ended_session") or ""
        if (ended and ended == self.credential.session_key) or not await _credential_valid(
            self.credential
        ):
            await self._close_unauthenticated()

    async def _watch_credential(self, seconds_left: float | None) -> None:
        """Check again when the session expires, and now and then in case a notice was
        lost; a credential that no longer holds closes the socket."""
        while seconds_left is not None:
            # A moment past the expiry, so the session is over when it is read; never a
            # busy loop, whatever the setting says.
            every = max(settings.PARLEY_WS_CREDENTIAL_RECHECK_SECONDS, 0.1)
            await asyncio.sleep(min(seconds_left + 0.05, every))
            seconds_left = await _credential_seconds_left(self.credential)
        await self._close_unauthenticated()

    async def _close_unauthenticated(self) -> None:
        if self.closed_unauthenticated:
            return
        self.closed_unauthenticated = True
        await self._unfollow()
        await self.close(code=CLOSE_UNAUTHENTICATED)

    # --- conversation notifications (channel layer) -----------------------------------

    async def conversation_notify(self, message: dict[str, Any]) -> None:
        # Starting a run sends its notifications together (the message stored, the title,
        # the branch, the run): each goes to the client as its own frame, as it always has.
        for body in notifications.notification_bodies(message):
            await self._notification_relay(body)

    async def _notification_relay(self, body: dict[str, Any]) -> None:
        await self.send_json(body)
        if body["type"] == notifications.RUN_STARTED:
            run_id = body["run"]["id"]
            if self.following != run_id:
                # Started from another tab or the API: show it here too.
                self._follow(run_id, after=None)
        elif body["type"] == notifications.MANY_DELETED:
            # To all the owner's sockets; one on a deleted conversation also ends, as before.
            own = str(self.conversation.pk) if self.conversation else ""
            if own not in body["conversation_ids"]:
                return
            await self.send_json({"type": notifications.DELETED, "conversation_id": own})
            # Gone with its owner's account: the credential ended first, as a client sees it.
            if not await _credential_valid(self.credential):
                await self._close_unauthenticated()
                return
            await self.close(code=CLOSE_NOT_FOUND)


def _resume_point(scope: dict[str, Any]) -> tuple[str, int | None] | None:
    """`?run_id=<id>&after=<n>` on the socket URL: follow that run from after n. A missing
    or unusable `after` replays the whole run, which loses nothing."""
    query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
    run_id = query.get("run_id", [""])[0]
    if not run_id:
        return None
    try:
        after: int | None = int(query.get("after", [""])[0])
    except ValueError:
        after = None
    return run_id, after if after is not None and after >= -1 else None


# --- database access (sync ORM, off the event loop) ----------------------------------------


@db_call
def _credential_valid(credential: SocketCredential | None) -> bool:
    # None: the connection was refused before its credential was taken.
    return credential is not None and socket_credential_valid(credential=credential)


@db_call
def _credential_seconds_left(credential: SocketCredential | None) -> float | None:
    return None if credential is None else socket_credential_seconds_left(credential=credential)


@db_call
def _conversation_get(user: Any, conversation_id: UUID | str) -> Conversation | None:
    try:
        return selectors.conversation_get(user=user, conversation_id=conversation_id)
    except Conversation.DoesNotExist:
        return None


@db_call
def _active_run(conversation: Conversation) -> Run | None:
    return selectors.run_active(conversation=conversation)


@db_call
def _run_get(conversation: Conversation, run_id: str) -> Run | None:
    return selectors.run_get(conversation=conversation, run_id=run_id)
