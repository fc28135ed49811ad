"""Following many run logs at once with one blocking read per event loop.

A web process follows one run per open socket (and per SSE stream). Each follower used
to block in its own XREAD on its own connection: with a thousand replies streaming, that
was ten thousand XREAD round trips a second, each woken for one event, and relaying
them took most of the process's CPU. Here every follower of a loop subscribes to one
`FollowHub`, which blocks in a single XREAD over every followed log and hands each
follower the entries past its own position; a busy hub reads many events per round trip.

No gap and no duplicate, as with a follower's own XREAD: the hub tracks each follower's
position and reads each log from the lowest position among its followers. A follower
that joins behind a read already in flight skips that read's answer (it may start past
the follower's position) and is served by the next one; the others drop entries they
already have. A new log joining while the hub blocks wakes it with an entry on the hub's
own wake stream, so a new follower never waits out the block.

When the read fails (Redis restarts, the connection drops), every follower gets the error
and the hub stops; a follower that retries subscribes again and starts a new read.
"""

import asyncio
import logging
import uuid
import weakref
from typing import Any

import redis.asyncio as aioredis

from conversations.engine.eventlog.connections import async_client, per_loop
from conversations.engine.eventlog.keys import PAGE, as_text

log = logging.getLogger(__name__)

# How long one read blocks when nothing happens; well below the connection's timeout.
BLOCK_MS = 10_000
# The pause before each read, per log followed, and at most (see _read).
LINGER_PER_LOG = 0.000_01
LINGER_MAX = 0.01
# The wake stream outlives a hub only this long if its process dies.
WAKE_TTL_SECONDS = 3600


def _number(stream_id: str) -> int:
    return int(stream_id.partition("-")[0])


def _lowest(followers: "set[Subscription]") -> str:
    if len(followers) == 1:  # the usual case: one socket follows a run
        return next(iter(followers)).last_id
    return min((follower.last_id for follower in followers), key=_number)


def _time_up(waiter: "asyncio.Future[None]") -> None:
    if not waiter.done():
        waiter.set_result(None)


class Alarm:
    """Cuts a follower's wait for entries short: `ring()` on the follower's loop when the
    follower must look up from its log (its caller is to be checked again)."""

    __slots__ = ("_waiter", "rung")

    def __init__(self) -> None:
        self.rung = False
        self._waiter: asyncio.Future[None] | None = None

    def ring(self) -> None:
        self.rung = True
        if self._waiter is not None:
            _time_up(self._waiter)

    def take(self) -> bool:
        """Whether it rang since the last call."""
        rung, self.rung = self.rung, False
        return rung


class Subscription:
    """One follower's view of a log: the entries past `last_id`, in order."""

    def __init__(self, hub: "FollowHub", key: str, last_id: str) -> None:
        self.key = key
        self.last_id = last_id  # the last entry given to this follower
        self._hub = hub
        self._entries: list[Any] = []
        self._error: BaseException | None = None
        self._waiter: asyncio.Future[None] | None = None

    async def entries(self, timeout: float, alarm: Alarm | None = None) -> list[Any]:
        """The entries that arrived since the last call, waiting up to `timeout` seconds
        for some, or until `alarm` rings; [] when none came. Raises the error that
        stopped the hub."""
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            # A stop that reached this follower as a Redis command of its own was already
            # answering was swallowed by the client: the command returned as if nothing
            # had come. Honoured here, before a long wait would keep the follower alive.
            raise asyncio.CancelledError
        if not self._entries and self._error is None and not (alarm and alarm.rung):
            loop = asyncio.get_running_loop()
            waiter = self._waiter = loop.create_future()
            if alarm is not None:
                alarm._waiter = waiter
            # A bare timer, not asyncio.wait_for: this runs once per event per follower.
            timer = loop.call_later(timeout, _time_up, waiter)
            try:
                await waiter
            finally:
                timer.cancel()
                self._waiter = None
                if alarm is not None:
                    alarm._waiter = None
        if self._error is not None:
            raise self._error
        entries, self._entries = self._entries, []
        return entries

    def close(self) -> None:
        self._hub._unsubscribe(self)

    def _give(self, entries: list[Any]) -> None:
        self._entries.extend(entries)
        self.last_id = as_text(entries[-1][0])
        if self._waiter is not None:
            _time_up(self._waiter)

    def _fail(self, error: BaseException) -> None:
        self._error = error
        if self._waiter is not None:
            _time_up(self._waiter)


class FollowHub:
    """The followers of one event loop and the one read that serves them."""

    def __init__(self, client: aioredis.Redis) -> None:
        self._client = client
        self._subscriptions: dict[str, set[Subscription]] = {}
        # Where the next read starts in each log: its lowest follower's position. Kept up
        # to date as followers come, go and receive, so a read costs no pass over them.
        self._positions: dict[str, str] = {}
        self._reader: asyncio.Task[None] | None = None
        # The positions the read in flight started from, by log; empty between reads.
        self._in_flight: dict[str, str] = {}
        self._wake_key = f"parley:follow-wake:{uuid.uuid4().hex}"
        self._wake_id = "0-0"
        self._waking = False
        self._wake_task: asyncio.Task[None] | None = None

    def subscribe(self, key: str, last_id: str) -> Subscription:
        """Follow the log at `key` from after `last_id`; close the subscription when done."""
        subscription = Subscription(self, key, last_id)
        followers = self._subscriptions.setdefault(key, set())
        followers.add(subscription)
        self._positions[key] = _lowest(followers)
        if self._reader is None:
            self._reader = asyncio.create_task(self._read())
        else:
            started = self._in_flight.get(key)
            if self._in_flight and (started is None or _number(last_id) < _number(started)):
                # The read in flight does not cover this follower: cut its block short.
                self._wake()
        return subscription

    def _unsubscribe(self, subscription: Subscription) -> None:
        followers = self._subscriptions.get(subscription.key)
        if followers is None or subscription not in followers:
            return
        followers.discard(subscription)
        if followers:
            self._positions[subscription.key] = _lowest(followers)
            return
        del self._subscriptions[subscription.key]
        del self._positions[subscription.key]
        if not self._subscriptions and self._in_flight:
            self._wake()  # the read ends and gives its connection back

    async def _read(self) -> None:
        try:
            while self._subscriptions:
                if len(self._positions) > 1:
                    # A read costs in proportion to the logs it names (here and in Redis):
                    # a short pause lets events gather, so that with many logs followed
                    # the reads carry many events each, not one each.
                    await asyncio.sleep(min(LINGER_MAX, len(self._positions) * LINGER_PER_LOG))
                    if not self._subscriptions:
                        break  # all gone meanwhile
                self._in_flight = streams = dict(self._positions)
                self._waking = False
                response = await self._client.execute_command(
                    "XREAD",
                    "COUNT",
                    PAGE,
                    "BLOCK",
                    BLOCK_MS,
                    "STREAMS",
                    *streams,
                    self._wake_key,
                    *streams.values(),
                    self._wake_id,
                )
                self._in_flight = {}
                for key, entries in _streams(response):
                    if key == self._wake_key:
                        self._wake_id = as_text(entries[-1][0])
                    elif entries:
                        self._deliver(key, streams[key], entries)
        except Exception as error:
            # Each follower hears of it and decides (the sockets retry from their position).
            self._fail_all(error)
        except BaseException as error:
            self._fail_all(error)
            raise
        finally:
            self._reader = None
            self._in_flight = {}

    def _deliver(self, key: str, started: str, entries: list[Any]) -> None:
        followers = self._subscriptions.get(key)
        if not followers:
            return
        start = _number(started)
        for subscription in followers:
            position = _number(subscription.last_id)
            if position < start:
                continue  # joined behind this read: the next one starts from its position
            if position == start:
                new = entries  # the usual case: the follower is where the read started
            else:
                new = [entry for entry in entries if _number(as_text(entry[0])) > position]
            if new:
                subscription._give(new)
        self._positions[key] = _lowest(followers)

    def _fail_all(self, error: BaseException) -> None:
        # A cancelled read (its loop closing) is a lost connection to the followers.
        failure = error if isinstance(error, Exception) else ConnectionError("follow aborted")
        for followers in self._subscriptions.values():
            for subscription in followers:
                subscription._fail(failure)
        self._subscriptions = {}
        self._positions = {}

    def _wake(self) -> None:
        if self._waking:
            return  # one wake per read is enough
        self._waking = True
        self._wake_task = asyncio.create_task(self._wake_send())

    async def _wake_send(self) -> None:
        try:
            pipe = self._client.pipeline(transaction=False)
            pipe.xadd(self._wake_key, {"w": 1}, maxlen=1, approximate=False)
            pipe.expire(self._wake_key, WAKE_TTL_SECONDS)
            await pipe.execute()
        except Exception:
            # The read ends by itself within BLOCK_MS and then covers the new follower.
            log.warning("could not wake the event-log follow hub", exc_info=True)


def _streams(response: Any) -> list[tuple[str, list[Any]]]:
    """(key, entries) per stream of an XREAD answer, in either protocol's shape."""
    if not response:
        return []
    if isinstance(response, dict):  # RESP3: {key: entries} or {key: [entries]}
        pairs = list(response.items())
    else:  # RESP2: [[key, entries], ...]
        pairs = [(item[0], item[1]) for item in response]
    streams = []
    for key, entries in pairs:
        if entries and isinstance(entries[0], list) and isinstance(entries[0][0], tuple | list):
            entries = entries[0]
        streams.append((as_text(key), list(entries)))
    return streams


_Loop = asyncio.AbstractEventLoop
_hubs: weakref.WeakKeyDictionary[_Loop, dict[str, FollowHub]] = weakref.WeakKeyDictionary()


def follow_hub() -> FollowHub:
    """This loop's hub for settings.REDIS_URL."""
    return per_loop(_hubs, lambda: FollowHub(async_client()))
