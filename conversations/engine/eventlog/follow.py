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
  ended, or the run is gone (deleted without its log being ended);
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
from conversations.engine.eventlog.keys import Event, RunId
from conversations.engine.eventlog.reader import events_follow

log = logging.getLogger(__name__)

# Pauses between tries to follow again after Redis failed: about 15 s of trouble (a
# restart, a failover) is ridden out before the follower gives up.
RETRY_DELAYS = (0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0)
# How long a sync caller leaving early waits for the follower to let go of the log.
CLOSE_WAIT_SECONDS = 5.0


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


def run_follow(
    run_id: RunId,
    *,
    after: int | None = None,
    keepalive: float | None = None,
    timeout: float | None = None,
    still_allowed: Callable[[], Awaitable[bool]] | None = None,
) -> AsyncGenerator[Followed]:
    """The run's events after `after` (all without it), then live ones, with KEEP_ALIVE
    at silences and a StreamLost if Redis stays away (see the module's docstring)."""
    _check_arguments(keepalive, still_allowed)
    items = _follow(str(run_id), after, keepalive, timeout, checks=still_allowed is not None)
    if still_allowed is None:
        # Asked for no checks, it yields none: no layer between the reader and the caller.
        return cast(AsyncGenerator[Followed], items)
    return _checked(items, still_allowed)


def run_follow_sync(
    run_id: RunId,
    *,
    after: int | None = None,
    keepalive: float | None = None,
    timeout: float | None = None,
    still_allowed: Callable[[], bool] | None = None,
) -> Generator[Followed]:
    """`run_follow` for sync code: the same follower runs on the background loop and hands
    its items over a queue (a round trip to the loop per event would cost several times
    the event); `still_allowed` runs on the calling thread."""
    _check_arguments(keepalive, still_allowed)
    if _loop_running():
        raise RuntimeError("run_follow_sync blocks its thread: use run_follow in async code")
    items = _follow(str(run_id), after, keepalive, timeout, checks=still_allowed is not None)
    handoff: queue.SimpleQueue[Followed | _Check | _Ended] = queue.SimpleQueue()
    closed = threading.Event()
    pump = loop_submit(_pump(items, handoff, closed))
    try:
        while not isinstance(item := handoff.get(), _Ended):
            if not isinstance(item, _Check):
                yield item
            elif still_allowed is not None and not still_allowed():
                return
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


def _check_arguments(keepalive: float | None, still_allowed: object) -> None:
    if keepalive is not None and not keepalive > 0:
        raise ValueError("keepalive must be a positive number of seconds")
    if still_allowed is not None and keepalive is None:
        raise ValueError("still_allowed is asked every `keepalive` seconds: give keepalive")


async def _checked(
    items: AsyncGenerator[Followed | _Check], still_allowed: Callable[[], Awaitable[bool]]
) -> AsyncGenerator[Followed]:
    async with contextlib.aclosing(items):
        async for item in items:
            if not isinstance(item, _Check):
                yield item
            elif not await still_allowed():
                return


async def _follow(
    run_id: str,
    after: int | None,
    keepalive: float | None,
    timeout: float | None,
    *,
    checks: bool,
) -> AsyncGenerator[Followed | _Check]:
    deadline = None if timeout is None else time.monotonic() + timeout
    failures = 0  # in a row, without an event delivered in between
    signed = checked = time.monotonic()  # the door checked its caller when it began
    while True:
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            return
        try:
            source = events_follow(run_id, after=after, timeout=left, idle=keepalive)
            async with contextlib.aclosing(source) as events:
                async for event in events:
                    if event is None:  # keepalive seconds of silence
                        if checks:
                            yield _CHECK
                        yield KEEP_ALIVE
                        signed = checked = time.monotonic()
                        continue
                    if keepalive is not None:
                        now = time.monotonic()
                        if checks and now - checked >= keepalive:
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
        log.warning("following run %s: Redis failed (%s), retrying in %ss", run_id, failed, delay)
        if deadline is not None:
            delay = min(delay, max(deadline - time.monotonic(), 0))
        await asyncio.sleep(delay)
        if keepalive is not None and time.monotonic() - signed >= keepalive:
            if checks:
                yield _CHECK
            yield KEEP_ALIVE
            signed = checked = time.monotonic()
