"""Model replies streamed on one event loop per process.

A worker's step does the database work of a model call (lease, model input) on its own
thread and hands the stream itself to this process's streaming loop: one thread running
asyncio, where every reply in flight is read, coalesced and written to its run's event
log. The step's task then ends; engine/inflight.py keeps the reply's lease alive and
stores its result when the stream ends. So a thread per streaming reply is never needed:
that cost a thread, and most of its CPU went to handing the GIL back and forth, every
upstream chunk waking its thread.

A stop request reaches the loop itself: it follows the stop broadcast
(engine/cancel.py) with one subscription per process and ends the run's
reply at once, at the next chunk (`_LiveReplies`). engine/inflight.py still looks for the
stop flags about once a second, for a broadcast missed while the subscription was down.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import logging
import threading
import weakref
from dataclasses import dataclass, field
from typing import Any, TypeVar

from django.conf import settings

from conversations.background_loop import process_loop
from conversations.engine import eventlog
from conversations.engine.cancel import cancel_requests_follow
from conversations.engine.llm.base import (
    GenerationSettings,
    Provider,
    ProviderError,
    ReasoningDelta,
    StreamAccumulator,
    TextDelta,
    ToolCallArgumentsDelta,
    ToolCallStarted,
    storable_event,
)

log = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass
class StreamResult:
    reply: StreamAccumulator = field(default_factory=StreamAccumulator)
    stopped: bool = False  # a stop request ended the stream early
    error: ProviderError | None = None


class ReplyStream:
    """One model call streamed into a run's event log on the streaming loop.

    The writer belongs to the streaming loop from `start()` until the future it returned
    is done; no other thread may touch it in between.
    """

    def __init__(
        self,
        *,
        provider: Provider,
        model: str,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        writer: eventlog.EventWriter,
        message_id: str,
        generation: GenerationSettings | None = None,
        follow_stops: bool = True,
    ) -> None:
        self.provider = provider
        self.model, self.messages, self.tools = model, messages, tools
        # The conversation's token limit and temperature; None: the server's defaults.
        self.generation = generation or GenerationSettings.effective()
        self.writer = writer
        self.message_id = message_id
        # A stored run's reply ends at a stop request; a run kept nowhere has no id a
        # client could name to stop it.
        self._follow_stops = follow_stops
        self._future: concurrent.futures.Future[StreamResult] | None = None
        self._task: asyncio.Task[StreamResult] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop_requested = False
        self._discard = False
        self._cancellable = True  # cleared once the stream is over: the rest must finish
        self._started = threading.Event()

    def start(self) -> ReplyStream:
        """Start streaming on the loop; `future` then resolves with the result."""
        self._loop = process_loop()
        self._future = asyncio.run_coroutine_threadsafe(self._run(), self._loop)
        return self

    @property
    def future(self) -> concurrent.futures.Future[StreamResult]:
        assert self._future is not None, "start() first"
        return self._future

    def wait(self, timeout: float) -> StreamResult | None:
        """The result, or None if the stream is still going after `timeout` seconds."""
        try:
            return self.future.result(timeout=timeout)
        except concurrent.futures.TimeoutError:
            return None

    def stop(self, *, discard: bool = False) -> None:
        """End the stream early. The text so far stays in the result, and pending deltas
        are written to the log unless `discard` (the lease is lost: another worker owns
        the log now)."""
        self._stop_requested = True
        self._discard = self._discard or discard
        if self._loop is not None and self._started.wait(timeout=5):
            self._loop.call_soon_threadsafe(self._cancel_task)

    def _cancel_task(self) -> None:
        if self._cancellable and self._task is not None and not self._task.done():
            self._task.cancel()

    def stop_on_loop(self, *, discard: bool = False) -> None:
        """`stop()` from the streaming loop's own thread (a stop request, a lost lease)."""
        self._stop_requested = True
        self._discard = self._discard or discard
        self._cancel_task()

    async def _run(self) -> StreamResult:
        self._task = asyncio.current_task()
        self._started.set()
        result = StreamResult()
        if self._stop_requested:
            result.stopped = True
            return result
        writer = self.writer
        flusher = asyncio.create_task(_flush_when_stalled(writer))
        stream = self.provider.stream(
            model=self.model, messages=self.messages, tools=self.tools, generation=self.generation
        )
        live = _live_replies() if self._follow_stops else None
        if live is not None:
            live.add(self)
        try:
            async for raw in stream:
                event = storable_event(raw)
                result.reply.add(event)
                if isinstance(event, TextDelta):
                    await writer.amessage_delta(self.message_id, event.text)
                elif isinstance(event, ToolCallStarted):
                    await writer.aemit(
                        eventlog.TOOL_CALL_CREATED,
                        message_id=self.message_id,
                        call_id=event.call_id,
                        name=event.name,
                    )
                elif isinstance(event, ToolCallArgumentsDelta):
                    await writer.atool_arguments_delta(event.call_id, event.delta)
                elif isinstance(event, ReasoningDelta):
                    # Shown live while the model thinks, so a long silence before the
                    # answer reads as thinking, not as a stalled reply.
                    await writer.areasoning_delta(self.message_id, event.text)
        except ProviderError as error:
            result.error = error
        except asyncio.CancelledError:
            if not self._stop_requested:
                raise
            # Our own stop: end the stream and keep what was said.
            task = asyncio.current_task()
            if task is not None:
                task.uncancel()
            result.stopped = True
        finally:
            self._cancellable = False
            if live is not None:
                live.discard(self)
            flusher.cancel()
            # Closing the generator closes the upstream response now, not at collection.
            with contextlib.suppress(Exception):
                await stream.aclose()
        if self._discard:
            writer.discard_pending()
        else:
            await writer.aflush()
        return result


class _LiveReplies:
    """The replies a streaming loop is streaming, by run id, and the loop's subscription
    to stop requests, started with its first reply. Used on the loop's thread only, so
    step threads never touch it: their replies register themselves once running there."""

    def __init__(self) -> None:
        self._replies: dict[str, set[ReplyStream]] = {}
        self._follower: asyncio.Task[None] | None = None
        self._url = ""

    def add(self, reply: ReplyStream) -> None:
        self._replies.setdefault(reply.writer.run_id, set()).add(reply)
        url = settings.REDIS_URL  # read each time: tests change it
        if self._follower is None or self._follower.done() or self._url != url:
            if self._follower is not None:
                self._follower.cancel()
            self._url = url
            # Serves every reply of the process: its lines must not name the run that
            # happened to start it, so it runs without that run's log ids.
            self._follower = asyncio.create_task(
                cancel_requests_follow(url=url, on_request=self._stop),
                context=contextvars.Context(),
            )

    def discard(self, reply: ReplyStream) -> None:
        replies = self._replies.get(reply.writer.run_id)
        if replies is not None:
            replies.discard(reply)
            if not replies:
                del self._replies[reply.writer.run_id]

    def _stop(self, run_id: str) -> None:
        for reply in list(self._replies.get(run_id, ())):
            try:
                reply.stop_on_loop()
            except Exception:  # one reply's trouble must not end the subscription
                log.exception("run %s: could not stop the reply", run_id)


def _live_replies() -> _LiveReplies:
    """The running loop's registry (a forked child's new loop gets its own)."""
    loop = asyncio.get_running_loop()
    live = _live_by_loop.get(loop)
    if live is None:
        live = _live_by_loop[loop] = _LiveReplies()
    return live


_live_by_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LiveReplies] = (
    weakref.WeakKeyDictionary()
)


async def _flush_when_stalled(writer: eventlog.EventWriter) -> None:
    """Write deltas that waited a whole coalescing window for the next chunk.

    Deltas are otherwise written when a chunk arrives and the window has passed, so a
    model that pauses mid-sentence would hold its last words back until it goes on.
    """
    window = max(writer.window, 0.01)
    while True:
        await asyncio.sleep(window)
        age = writer.pending_age()
        if age is not None and age >= window:
            with contextlib.suppress(Exception):  # the stream's own writes report failures
                await writer.aflush()
