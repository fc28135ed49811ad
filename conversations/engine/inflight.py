"""Replies streaming in this process, holding no worker thread.

A model step does its database work on a worker thread, hands the reply's stream to the
process's streaming loop (engine/streaming.py) and its task ends: the thread takes the
next step, so a worker streams as many replies at once as its loop and upstream allow,
not as many as it has threads. What a reply in flight still needs is kept here:

- its lease, renewed together with all the others: one statement per renewal period for
  every reply of the process (`leases_renew`), not one per reply;
- stop requests: the broadcast reaches the loop directly (streaming.py); the flags of all
  replies are read in one Redis round trip a second, for a broadcast that was missed,
  and the renewal reads the database's own record too;
- its end: when the stream ends, the step's `on_end` stores the result on one of a few
  store threads (database work stays off the loop, so the loop keeps streaming the
  others), which also enqueues the next step.

Durability is the lease's, as before: a process that dies mid-reply stops renewing, the
lease expires and the watchdog hands the run to another worker, which streams the reply
again under the same message id.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from django.conf import settings

from conversations.background_loop import process_loop
from conversations.engine.cancel import cancel_flags_raised
from conversations.engine.lease import Lease, LeaseLost, leases_renew, release_connection
from conversations.engine.streaming import ReplyStream, StreamResult

log = logging.getLogger(__name__)

# How often the keeper wakes: to look for stop flags (one Redis round trip for all the
# replies), and to renew the leases when a third of the lease has passed.
CHECK_SECONDS = 1.0


class ReplyAbandoned(Exception):
    """The process is shutting down and stopped this reply before it ended: nothing of it
    is stored, and the run goes back to the queue for another worker."""


@dataclass(eq=False)
class InFlightReply:
    stream: ReplyStream
    lease: Lease
    # Stores the reply once its stream ended; runs on a store thread.
    on_end: Callable[[InFlightReply], None]
    context: contextvars.Context = field(default_factory=contextvars.copy_context)
    done: concurrent.futures.Future[None] = field(default_factory=concurrent.futures.Future)
    lost: bool = False
    abandoned: bool = False
    _stream_future: concurrent.futures.Future[StreamResult] | None = None

    @property
    def run_id(self) -> uuid.UUID:
        return self.lease.run_id

    def result(self) -> StreamResult:
        """The stream's result, for `on_end`: raises LeaseLost if another worker took the
        run meanwhile, ReplyAbandoned if a shutdown stopped it, or the stream's crash."""
        assert self._stream_future is not None
        result = self._stream_future.result()
        if self.lost:
            raise LeaseLost
        if self.abandoned:
            raise ReplyAbandoned
        return result


class _InFlight:
    """This process's replies in flight (a forked child starts with none)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._replies: dict[uuid.UUID, InFlightReply] = {}
        self._pid = 0
        self._store: concurrent.futures.ThreadPoolExecutor | None = None
        self._keeper_thread: concurrent.futures.ThreadPoolExecutor | None = None
        self._keeper: asyncio.Task[None] | None = None
        self._keeper_interval = CHECK_SECONDS
        self._drained = threading.Condition(self._lock)

    def _fresh(self) -> None:
        """Under the lock: new pools after a fork (the parent's threads are not ours)."""
        if self._pid != os.getpid():
            self._pid = os.getpid()
            self._replies = {}
            self._keeper = None
            self._store = concurrent.futures.ThreadPoolExecutor(
                max_workers=max(1, settings.PARLEY_WORKER_STORE_THREADS),
                thread_name_prefix="parley-store",
            )
            # One thread: renewals never overlap, and it keeps one database connection.
            self._keeper_thread = concurrent.futures.ThreadPoolExecutor(
                max_workers=1, thread_name_prefix="parley-leases"
            )

    def start(self, reply: InFlightReply) -> concurrent.futures.Future[None]:
        """Stream the reply on the loop; its `done` resolves once `on_end` has run."""
        loop = process_loop()
        with self._lock:
            self._fresh()
            self._replies[reply.run_id] = reply
        loop.call_soon_threadsafe(self._keeper_ensure)
        reply._stream_future = reply.stream.start().future
        reply._stream_future.add_done_callback(lambda _: self._ended(reply))
        return reply.done

    def count(self) -> int:
        with self._lock:
            return len(self._replies) if self._pid == os.getpid() else 0

    def _ended(self, reply: InFlightReply) -> None:
        assert self._store is not None
        try:
            self._store.submit(reply.context.run, self._store_reply, reply)
        except RuntimeError:  # the pool is shut down: the process is exiting
            self._forget(reply)

    def _store_reply(self, reply: InFlightReply) -> None:
        try:
            reply.on_end(reply)
        except BaseException:  # on_end reports its own trouble; this only must not leak
            log.exception("run %s: storing the reply failed", reply.run_id)
        finally:
            release_connection()
            self._forget(reply)

    def _forget(self, reply: InFlightReply) -> None:
        with self._lock:
            if self._replies.get(reply.run_id) is reply:
                del self._replies[reply.run_id]
            self._drained.notify_all()
        if not reply.done.done():
            reply.done.set_result(None)

    # --- the keeper, on the loop -------------------------------------------------------

    def _keeper_ensure(self) -> None:
        if self._keeper is not None and self._keeper_interval != CHECK_SECONDS:
            self._keeper.cancel()  # tests change the interval: not a sleep of the old one
            self._keeper = None
        if self._keeper is None or self._keeper.done():
            self._keeper_interval = CHECK_SECONDS
            # It serves every reply: its lines must not name the run that started it.
            self._keeper = asyncio.get_running_loop().create_task(
                self._keep(), context=contextvars.Context()
            )

    async def _keep(self) -> None:
        loop = asyncio.get_running_loop()
        renewed_at = time.monotonic()
        while True:
            # Never less often than the renewals need (tests shorten the lease).
            await asyncio.sleep(min(CHECK_SECONDS, Lease.period()))
            with self._lock:
                replies = list(self._replies.values())
            if not replies:
                return
            renew = time.monotonic() - renewed_at >= Lease.period()
            try:
                lost, stopping = await loop.run_in_executor(
                    self._keeper_thread, _check, replies, renew
                )
            except Exception:
                # The database or Redis is away: the streams go on, and the next round
                # tries again (a lease that expires meanwhile is the watchdog's to repair).
                log.warning("replies in flight: lease or stop check failed", exc_info=True)
                continue
            if renew:
                renewed_at = time.monotonic()
            for reply in lost:  # the step's guard says so in the log when it ends
                reply.lost = True
                reply.stream.stop_on_loop(discard=True)
            for reply in stopping:
                reply.stream.stop_on_loop()

    # --- shutdown ---------------------------------------------------------------------

    def drain(self, timeout: float) -> int:
        """Wait up to `timeout` seconds for the replies in flight to end and be stored;
        stop the rest and give their runs back to the queue. Says how many were given
        back."""
        deadline = time.monotonic() + timeout
        with self._lock:
            if self._pid != os.getpid():
                return 0
            while self._replies and (left := deadline - time.monotonic()) > 0:
                self._drained.wait(timeout=left)
            remaining = list(self._replies.values())
        for reply in remaining:
            reply.abandoned = True
            reply.stream.stop(discard=True)
        for reply in remaining:
            with contextlib.suppress(concurrent.futures.TimeoutError):
                reply.done.result(timeout=10)
        return len(remaining)


def _check(
    replies: list[InFlightReply], renew: bool
) -> tuple[list[InFlightReply], set[InFlightReply]]:
    """On the keeper's thread: which replies lost their lease, which must stop."""
    try:
        lost: list[InFlightReply] = []
        stopping: set[InFlightReply] = set()
        if renew:
            held, cancelled = leases_renew([reply.lease for reply in replies])
            lost = [reply for reply in replies if reply.run_id not in held]
            stopping |= {reply for reply in replies if reply.run_id in cancelled}
        flagged = cancel_flags_raised(run_ids=[str(reply.run_id) for reply in replies])
        stopping |= {reply for reply in replies if str(reply.run_id) in flagged}
        return lost, stopping
    finally:
        release_connection()


in_flight = _InFlight()


def replies_drain(*, timeout: float) -> int:
    """At worker shutdown: let the replies in flight end (up to `timeout` seconds), then
    hand the others back to the queue. How many were handed back."""
    return in_flight.drain(timeout)
