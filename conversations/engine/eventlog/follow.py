"""Following a run: the one follower every door uses (the websocket, the REST SSE stream,
the OpenAI stream, and the waits of `POST chat/` and of a non-streamed response); the
doors only format what it yields.

`run_follow` replays the run's log from `after`, then follows it live with the same
cursor (reader.events_follow): no gap, no duplicate. Around that read it

- retries when Redis fails (refused, reset, restarted: `redis.RedisError`, `OSError`)
  from the last event it delivered, pausing RETRY_DELAYS between tries (about 15 s in
  all; a delivered event starts the count again), then yields a `StreamLost` and ends.
  A restarted Redis that lost the log is followed on from the same position, so the
  worker's next writes still arrive;
- yields `KEEP_ALIVE` after `keepalive` seconds without an event (a queued run, a slow
  model, a long tool), for the door to send a sign of life;
- asks `still_allowed()` every `keepalive` seconds (at a silence, or before the next
  event once that long has passed) and ends when it says no: the caller's credential
  ended, or the run is gone (deleted without its log being ended). It also asks at once
  when `recheck` calls for it (a notice that the caller's credential may have ended:
  entered on the follower's loop, it calls the function it is given there), once when it
  starts listening (a notice sent before may have gone to nobody), and when the last
  answer said the permission lapses by itself (a number of seconds: a session's expiry).
  A wait for the next event is cut short for these, so they take effect at once, without
  a task or a timer per event;
- ends after the terminal event, and quietly once `timeout` seconds have passed.

`run_follow_sync` is the same follower for sync code (a WSGI stream, a request waiting
for a run's end): the same generator runs on the process's background loop, and the
caller asks its own `still_allowed` on its own thread, where its database connection (and
transaction) is.
"""

import asyncio
import contextlib
import logging
import queue
import threading
import time
from collections.abc import AsyncGenerator, Awaitable, Callable, Generator
from dataclasses import dataclass
from typing import Final, cast

import redis

from conversations.background_loop import loop_submit
from conversations.engine.eventlog.hub import Alarm
from conversations.engine.eventlog.keys import Event, RunId
from conversations.engine.eventlog.reader import events_follow

log = logging.getLogger(__name__)

# Pauses between tries to follow again after Redis failed: about 15 s of trouble (a
# restart, a failover) is ridden out before the follower gives up.
RETRY_DELAYS = (0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0)
# How long a sync caller leaving early waits for the follower to let go of the log.
CLOSE_WAIT_SECONDS = 5.0
# A permission that lapses by itself is asked about again this long after, so that it
# has ended when it is read.
LAPSE_MARGIN_SECONDS = 0.05

# What `still_allowed` answers: False (no more), True, or the seconds it still holds for.
Allowed = bool | float
# Calls for a check: entered on the follower's loop with the function that asks for one.
Recheck = Callable[[Callable[[], None]], contextlib.AbstractAsyncContextManager[object]]


class KeepAlive:
    """What `run_follow` yields after `keepalive` seconds without an event."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "KEEP_ALIVE"


KEEP_ALIVE: Final = KeepAlive()


@dataclass(frozen=True, slots=True)
class StreamLost:
    """The follower's last item when Redis stayed away: the caller may resume after
    `after` (None: from the first event) once it can."""

    run_id: str
    after: int | None


Followed = Event | KeepAlive | StreamLost


class _Check:
    """Time to ask whether the caller may still follow (asked by the face in use)."""

    __slots__ = ()


_CHECK: Final = _Check()


class _Watch:
    """When a follower asks its caller besides its regular checks: its alarm rings (on the
    follower's loop) at a notice from `recheck`, and when the last answer said the
    permission lapses before the next regular check."""

    def __init__(self, keepalive: float) -> None:
        self.alarm = Alarm()
        self.keepalive = keepalive
        self.loop: asyncio.AbstractEventLoop | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._closed = False

    def lapse_at(self, allowed: Allowed) -> None:
        """On the follower's loop, after an answer that was not no."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        # A lapse after the next regular check is that check's to find.
        if self._closed or allowed is True or allowed >= self.keepalive:
            return
        delay = max(float(allowed), 0.0) + LAPSE_MARGIN_SECONDS
        self._timer = asyncio.get_running_loop().call_later(delay, self.alarm.ring)

    def lapse_at_threadsafe(self, allowed: Allowed) -> None:
        """From the sync caller's thread (the follower ran, so its loop is known)."""
        if self.loop is not None and allowed is not True and allowed < self.keepalive:
            self.loop.call_soon_threadsafe(self.lapse_at, allowed)

    def close(self) -> None:
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()


def run_follow(
    run_id: RunId,
    *,
    after: int | None = None,
    keepalive: float | None = None,
    timeout: float | None = None,
    still_allowed: Callable[[], Awaitable[Allowed]] | None = None,
    recheck: Recheck | None = None,
) -> AsyncGenerator[Followed]:
    """The run's events after `after` (all without it), then live ones, with KEEP_ALIVE
    at silences and a StreamLost if Redis stays away (see the module's docstring).

    `still_allowed` answers False (the caller may no longer follow: the follower ends),
    True, or the seconds the permission still holds for (it is asked again then)."""
    _check_arguments(keepalive, still_allowed, recheck)
    watch = None if still_allowed is None or keepalive is None else _Watch(keepalive)
    items = _follow(str(run_id), after, keepalive, timeout, watch=watch, recheck=recheck)
    if still_allowed is None or watch is None:
        # Asked for no checks, it yields none: no layer between the reader and the caller.
        return cast(AsyncGenerator[Followed], items)
    return _checked(items, still_allowed, watch)


def run_follow_sync(
    run_id: RunId,
    *,
    after: int | None = None,
    keepalive: float | None = None,
    timeout: float | None = None,
    still_allowed: Callable[[], Allowed] | None = None,
    recheck: Recheck | None = None,
) -> Generator[Followed]:
    """`run_follow` for sync code: the same follower runs on the background loop and hands
    its items over a queue (a round trip to the loop per event would cost several times
    the event); `still_allowed` runs on the calling thread, and `recheck` is entered on the
    background loop."""
    _check_arguments(keepalive, still_allowed, recheck)
    if _loop_running():
        raise RuntimeError("run_follow_sync blocks its thread: use run_follow in async code")
    watch = None if still_allowed is None or keepalive is None else _Watch(keepalive)
    items = _follow(str(run_id), after, keepalive, timeout, watch=watch, recheck=recheck)
    handoff: queue.SimpleQueue[Followed | _Check | _Ended] = queue.SimpleQueue()
    closed = threading.Event()
    pump = loop_submit(_pump(items, handoff, closed))
    try:
        while not isinstance(item := handoff.get(), _Ended):
            if not isinstance(item, _Check):
                yield item
            elif still_allowed is not None and watch is not None:
                allowed = still_allowed()
                if allowed is False:
                    return
                watch.lapse_at_threadsafe(allowed)
        if item.error is not None:
            raise item.error
    finally:
        # Left early (a client gone, told no): the follower stops and leaves the shared read.
        pump.cancel()
        # Bounded: a pump cancelled before it ever ran has nothing to close and says nothing.
        closed.wait(CLOSE_WAIT_SECONDS)


def _loop_running() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


@dataclass(frozen=True, slots=True)
class _Ended:
    error: Exception | None = None


async def _pump(
    items: AsyncGenerator[Followed | _Check],
    handoff: "queue.SimpleQueue[Followed | _Check | _Ended]",
    closed: threading.Event,
) -> None:
    try:
        async for item in items:
            handoff.put(item)
        handoff.put(_Ended())
    except Exception as error:
        handoff.put(_Ended(error))
    except BaseException:
        handoff.put(_Ended())
        raise
    finally:
        await items.aclose()
        closed.set()


def _check_arguments(keepalive: float | None, still_allowed: object, recheck: object) -> None:
    if keepalive is not None and not keepalive > 0:
        raise ValueError("keepalive must be a positive number of seconds")
    if still_allowed is not None and keepalive is None:
        raise ValueError("still_allowed is asked every `keepalive` seconds: give keepalive")
    if recheck is not None and still_allowed is None:
        raise ValueError("recheck calls for asking still_allowed: give still_allowed")


async def _checked(
    items: AsyncGenerator[Followed | _Check],
    still_allowed: Callable[[], Awaitable[Allowed]],
    watch: _Watch,
) -> AsyncGenerator[Followed]:
    async with contextlib.aclosing(items):
        async for item in items:
            if not isinstance(item, _Check):
                yield item
                continue
            allowed = await still_allowed()
            if allowed is False:
                return
            watch.lapse_at(allowed)


async def _follow(
    run_id: str,
    after: int | None,
    keepalive: float | None,
    timeout: float | None,
    *,
    watch: _Watch | None,
    recheck: Recheck | None,
) -> AsyncGenerator[Followed | _Check]:
    async with contextlib.AsyncExitStack() as stack:
        alarm = None
        if watch is not None:
            alarm = watch.alarm
            watch.loop = asyncio.get_running_loop()
            stack.callback(watch.close)
            if recheck is not None:
                await stack.enter_async_context(recheck(alarm.ring))
                # A notice sent between the door's check and now went to nobody: ask once
                # (and learn when the permission lapses).
                alarm.ring()
        deadline = None if timeout is None else time.monotonic() + timeout
        failures = 0  # in a row, without an event delivered in between
        signed = checked = time.monotonic()  # the door checked its caller when it began
        while True:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return
            try:
                source = events_follow(
                    run_id, after=after, timeout=left, idle=keepalive, alarm=alarm
                )
                async with contextlib.aclosing(source) as events:
                    async for event in events:
                        if event is None:  # keepalive seconds of silence
                            if alarm is not None:
                                alarm.take()  # this check answers it too
                                yield _CHECK
                            yield KEEP_ALIVE
                            signed = checked = time.monotonic()
                            continue
                        if isinstance(event, Alarm):  # rang while waiting for the next event
                            if event.take():
                                yield _CHECK
                                checked = time.monotonic()
                            continue
                        if keepalive is not None:
                            now = time.monotonic()
                            if alarm is not None and (alarm.take() or now - checked >= keepalive):
                                yield _CHECK
                                checked = now
                            signed = now
                        yield event
                        # Where a retry picks up: the same cursor, so no gap and no duplicate.
                        after, failures = event["sequence_number"], 0
                return
            except (redis.RedisError, OSError) as error:
                failed = type(error).__name__
            if failures == len(RETRY_DELAYS):
                log.warning("following run %s: Redis stayed away (%s); giving up", run_id, failed)
                yield StreamLost(run_id=run_id, after=after)
                return
            delay, failures = RETRY_DELAYS[failures], failures + 1
            log.warning(
                "following run %s: Redis failed (%s), retrying in %ss", run_id, failed, delay
            )
            if deadline is not None:
                delay = min(delay, max(deadline - time.monotonic(), 0))
            await asyncio.sleep(delay)
            if keepalive is not None and time.monotonic() - signed >= keepalive:
                if alarm is not None:
                    alarm.take()
                    yield _CHECK
                yield KEEP_ALIVE
                signed = checked = time.monotonic()
            elif alarm is not None and alarm.take():
                yield _CHECK
                checked = time.monotonic()
