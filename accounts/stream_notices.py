"""HTTP streams (Server-Sent Events) hear their user's credential notices as sockets do
(accounts.sockets.user_sockets_recheck), through one channel per event loop rather than
one per stream: there may be thousands of streams, of far fewer users.

While a stream listens (`credential_notices_listen`), its loop's channel is in its user's
socket group; each notice for that user calls `on_notice` of every stream of theirs on
the loop, which then checks its own credential (other keys and sessions of the user stay
open). The channel opens with the loop's first listener and stays for the loop's life;
it joins a user's group with their first stream and leaves it with their last. Delivery
is best effort (the channel layer may be away): a stream's regular checks still find a
credential that ended.
"""

import asyncio
import contextlib
import logging
import weakref
from collections.abc import AsyncIterator, Callable
from typing import Any

from channels.layers import BaseChannelLayer, get_channel_layer

from accounts.sockets import RECHECK, user_sockets_group

log = logging.getLogger(__name__)

# How long a stream waits to join its user's group before going on without notices.
JOIN_SECONDS = 2.0
# The pause after the channel failed to receive, before it tries again.
RECEIVE_RETRY_SECONDS = 1.0


@contextlib.asynccontextmanager
async def credential_notices_listen(
    *, user_id: int, on_notice: Callable[[], None]
) -> AsyncIterator[None]:
    """Call `on_notice()` on this loop at each credential notice for the user, while open.
    Once entered, a notice sent from then on is heard (unless the channel layer failed,
    which is logged)."""
    listener = _listener()
    if listener is None:
        yield
        return
    try:
        await listener.add(user_id, on_notice)
        yield
    finally:
        listener.discard(user_id, on_notice)


class _User:
    __slots__ = ("channel", "hearers", "joined")

    def __init__(self) -> None:
        self.hearers: set[Callable[[], None]] = set()
        self.joined: asyncio.Task[None] | None = None
        self.channel: str | None = None  # the channel in the user's group, once joined


class _Listener:
    """One loop's channel on the layer, in the groups of the users it has streams of."""

    def __init__(self, layer: BaseChannelLayer) -> None:
        self.layer = layer
        self.users: dict[int, _User] = {}
        self._serving: asyncio.Task[None] | None = None
        self._channel: asyncio.Future[str] | None = None
        self._leaving: set[asyncio.Task[None]] = set()

    async def add(self, user_id: int, hearer: Callable[[], None]) -> None:
        user = self.users.get(user_id)
        if user is None:
            user = self.users[user_id] = _User()
            user.joined = asyncio.create_task(self._join(user_id, user))
        user.hearers.add(hearer)
        assert user.joined is not None
        # asyncio.wait: the join's own failure or cancellation is not this stream's.
        await asyncio.wait({user.joined}, timeout=JOIN_SECONDS)
        failed = not user.joined.done() or user.joined.cancelled() or user.joined.exception()
        if failed:
            log.warning("a stream of user %s hears no credential notices", user_id)

    def discard(self, user_id: int, hearer: Callable[[], None]) -> None:
        user = self.users.get(user_id)
        if user is None or hearer not in user.hearers:
            return
        user.hearers.discard(hearer)
        if user.hearers:
            return
        del self.users[user_id]
        leaving = asyncio.create_task(self._leave(user_id, user))
        self._leaving.add(leaving)
        leaving.add_done_callback(self._leaving.discard)

    async def _join(self, user_id: int, user: _User) -> None:
        channel = await asyncio.shield(self._channel_open())
        await self.layer.group_add(user_sockets_group(user_id), channel)
        user.channel = channel

    async def _leave(self, user_id: int, user: _User) -> None:
        joined = user.joined
        if joined is not None:
            await asyncio.wait({joined})
            if joined.cancelled() or joined.exception() is not None:
                return  # never joined (its stream said so)
        if user.channel is None or user_id in self.users:
            return  # back meanwhile: the channel stays in the group
        try:
            await self.layer.group_discard(user_sockets_group(user_id), user.channel)
        except Exception:
            log.warning("could not leave user %s's group", user_id, exc_info=True)

    def _channel_open(self) -> "asyncio.Future[str]":
        if self._serving is None or self._channel is None:
            self._channel = asyncio.get_running_loop().create_future()
            self._serving = asyncio.create_task(self._serve(self._channel))
        return self._channel

    async def _serve(self, opened: "asyncio.Future[str]") -> None:
        try:
            channel = await self.layer.new_channel()
        except BaseException as error:
            if self._channel is opened:
                self._serving = self._channel = None  # the next stream tries again
            if not isinstance(error, Exception):
                opened.cancel()
                raise
            opened.set_exception(error)
            opened.exception()  # the joiners log it; asyncio need not
            return
        opened.set_result(channel)
        while True:
            try:
                message = await self.layer.receive(channel)
            except Exception:
                log.warning("credential notices: receive failed", exc_info=True)
                await asyncio.sleep(RECEIVE_RETRY_SECONDS)
                continue
            self._deliver(message)

    def _deliver(self, message: dict[str, Any]) -> None:
        if message.get("type") != RECHECK:
            return  # a conversation notification to the user's sockets
        user_id = message.get("user_id")
        user = self.users.get(user_id) if isinstance(user_id, int) else None
        for hearer in list(user.hearers if user is not None else ()):
            try:
                hearer()
            except Exception:  # one stream's trouble must not deafen the others
                log.exception("a stream could not take a credential notice")


_listeners: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Listener] = (
    weakref.WeakKeyDictionary()
)


def _listener() -> _Listener | None:
    """This loop's listener on the current channel layer (None without one)."""
    layer = get_channel_layer()
    if layer is None:
        return None
    loop = asyncio.get_running_loop()
    listener = _listeners.get(loop)
    if listener is None or listener.layer is not layer:
        # A layer replaced (settings changed) leaves the old listener to its streams.
        listener = _listeners[loop] = _Listener(layer)
    return listener
