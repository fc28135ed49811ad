"""Appending to a run's event log (the format: the package's docstring)."""

import asyncio
import json
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import redis
import redis.asyncio as aioredis
from django.conf import settings
from django.core.serializers.json import DjangoJSONEncoder

from conversations import metrics
from conversations.engine.eventlog.connections import appends_batcher, async_pool, redis_client
from conversations.engine.eventlog.keys import (
    ENVELOPE,
    FIELD,
    SAFETY_TTL_SECONDS,
    EventLogConflict,
    RunId,
    entry_id,
    entry_json,
    entry_sequence,
    stream_key,
)
from conversations.event_types import (
    EVENT_TYPES,
    MESSAGE_DELTA,
    REASONING_DELTA,
    TERMINAL_TYPES,
    TOOL_CALL_ARGUMENTS_DELTA,
)


@dataclass
class _Pending:
    type: str
    key: str  # message_id or call_id
    target: str
    parts: list[str] = field(default_factory=list)
    size: int = 0


class EventWriter:
    """Appends one run's events. Not thread-safe: one writer per run step.

    The sync methods serve a step's thread; the `a...` ones the streaming loop
    (conversations/engine/streaming.py), which owns the writer while a reply streams. Async writes
    are serialized by a lock and shielded from cancellation, so a stopped stream never
    leaves a write half-known: its sequence numbers stay gapless.
    """

    def __init__(
        self,
        run_id: RunId,
        *,
        next_sequence: int = 0,
        client: redis.Redis | None = None,
        coalesce_ms: int | None = None,
        coalesce_chars: int | None = None,
        ttl_seconds: int | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.run_id = str(run_id)
        self.key = stream_key(run_id)
        self.next_sequence = next_sequence
        self.writes = 0  # write round trips to Redis, for the benchmarks
        self._given_client = client
        self._alock: asyncio.Lock | None = None
        conf = settings
        self.window = (conf.PARLEY_EVENT_COALESCE_MS if coalesce_ms is None else coalesce_ms) / 1000
        self._chars = conf.PARLEY_EVENT_COALESCE_CHARS if coalesce_chars is None else coalesce_chars
        self._ttl: int = conf.PARLEY_EVENT_TTL_SECONDS if ttl_seconds is None else ttl_seconds
        self._clock = clock
        self._pending: _Pending | None = None
        self._pending_since = 0.0
        # When deltas were last written: the first delta after a quiet spell goes out at
        # once (the reader sees the reply start without delay), later ones at most once a
        # window (a fast reply costs a few writes a second, not one per token).
        self._flushed_at = -math.inf
        self._fresh = True  # the first write also sets the safety TTL
        # When the run started (a Unix time), while its reply's first words are still to
        # come (set by the runner): the first message.delta written is its time to first
        # token.
        self.first_token_since: float | None = None

    @property
    def _client(self) -> redis.Redis:
        # Resolved at first write: a recorder (below) never talks to Redis.
        if self._given_client is None:
            self._given_client = redis_client()
        return self._given_client

    @classmethod
    def open(
        cls, run_id: RunId, *, client: redis.Redis | None = None, **options: Any
    ) -> "EventWriter":
        """A writer continuing the log after its last event (a new step, or after a crash);
        `options` as for the constructor."""
        client = client if client is not None else redis_client()
        last = client.xrevrange(stream_key(run_id), count=1)
        next_sequence = entry_sequence(last[0][0]) + 1 if last else 0
        return cls(run_id, next_sequence=next_sequence, client=client, **options)

    # --- sync (a step's thread) ---

    def emit(self, type: str, /, **payload: Any) -> int:
        """Append one event after any pending deltas; returns its sequence number."""
        self.flush()
        return self._append(type, payload)

    def emit_second(self, type: str, /, **payload: Any) -> bool:
        """Append the log's second event (sequence 1) if the log holds exactly one, in one
        round trip and with no read first (a run's first step, after its announcement);
        False, writing nothing, if it holds none or more: `open()` finds where it is.

        Redis decides: an append that may not create the stream (NOMKSTREAM) lands only
        where the stream exists, and the explicit id only after a smaller last id, so
        only after the first entry alone."""
        assert self.next_sequence == 1, "a new writer, at the second event"
        sequence, entry_id, data, ttl = self._entry(type, payload)
        pipe = self._client.pipeline(transaction=False)
        pipe.xadd(self.key, {FIELD: data}, id=entry_id, nomkstream=True)
        if ttl is not None:
            pipe.expire(self.key, ttl)
        try:
            reply = pipe.execute(raise_on_error=False)[0]
            if isinstance(reply, Exception):
                raise reply
        except redis.ResponseError as error:
            if not _stale(error):
                raise
            # Ours, when a retry after a dropped connection found our first try landed.
            found = self._client.xrange(self.key, entry_id, entry_id)
            if not (found and entry_json(found[0]) == data):
                return False
        else:
            if reply is None:  # no stream: the run was never announced
                return False
        self._written(sequence, type)
        return True

    def message_delta(self, message_id: str, text: str) -> None:
        for batch in self._delta(MESSAGE_DELTA, "message_id", message_id, text):
            self._append(*batch)

    def tool_arguments_delta(self, call_id: str, text: str) -> None:
        for batch in self._delta(TOOL_CALL_ARGUMENTS_DELTA, "call_id", call_id, text):
            self._append(*batch)

    def reasoning_delta(self, message_id: str, text: str) -> None:
        for batch in self._delta(REASONING_DELTA, "message_id", message_id, text):
            self._append(*batch)

    def flush(self) -> int | None:
        """Write pending deltas as one event; returns its sequence number, if any."""
        batch = self._take_pending()
        return None if batch is None else self._append(*batch)

    # --- async (the streaming loop) ---

    async def aemit(self, type: str, /, **payload: Any) -> int:
        await self.aflush()
        return await self._awrite(type, payload)

    async def amessage_delta(self, message_id: str, text: str) -> None:
        for batch in self._delta(MESSAGE_DELTA, "message_id", message_id, text):
            await self._awrite(*batch)

    async def atool_arguments_delta(self, call_id: str, text: str) -> None:
        for batch in self._delta(TOOL_CALL_ARGUMENTS_DELTA, "call_id", call_id, text):
            await self._awrite(*batch)

    async def areasoning_delta(self, message_id: str, text: str) -> None:
        # Coalesced like the answer's text: a model thinking at 100 tokens/s costs a few
        # writes a second, and the switch to answering flushes the thoughts first.
        for batch in self._delta(REASONING_DELTA, "message_id", message_id, text):
            await self._awrite(*batch)

    async def aflush(self) -> int | None:
        batch = self._take_pending()
        return None if batch is None else await self._awrite(*batch)

    # --- coalescing ---

    def pending_age(self) -> float | None:
        """Seconds the oldest unwritten delta has waited, or None."""
        return None if self._pending is None else self._clock() - self._pending_since

    def discard_pending(self) -> None:
        self._pending = None

    def _due(self) -> bool:
        return self._clock() - self._flushed_at >= self.window

    def _take_pending(self) -> tuple[str, dict[str, Any]] | None:
        pending, self._pending = self._pending, None
        if pending is None:
            return None
        self._flushed_at = self._clock()
        return pending.type, {pending.key: pending.target, "delta": "".join(pending.parts)}

    def _delta(
        self, type: str, field: str, target: str, text: str
    ) -> list[tuple[str, dict[str, Any]]]:
        """Add a delta; returns the batches now due for writing, in order."""
        if not text:
            return []
        due = []
        pending = self._pending
        if pending is not None and (pending.type, pending.target) != (type, target):
            due.append(self._take_pending())
            pending = None
        if pending is None:
            pending = self._pending = _Pending(type, field, target)
            self._pending_since = self._clock()
        pending.parts.append(text)
        pending.size += len(text)
        if pending.size >= self._chars or self._due():
            due.append(self._take_pending())
        return [batch for batch in due if batch is not None]

    # --- writing ---

    def _entry(self, type: str, payload: Mapping[str, Any]) -> tuple[int, str, str, int | None]:
        """(sequence, entry id, JSON, TTL to set) of the next event."""
        if type not in EVENT_TYPES:
            raise ValueError(f"unknown event type {type!r}")
        if reserved := ENVELOPE & payload.keys():
            raise TypeError(f"reserved event keys in payload: {sorted(reserved)}")
        sequence = self.next_sequence
        event = {"type": type, "run_id": self.run_id, "sequence_number": sequence, **payload}
        data = json.dumps(event, cls=DjangoJSONEncoder, separators=(",", ":"))
        ttl = self._ttl if type in TERMINAL_TYPES else SAFETY_TTL_SECONDS if self._fresh else None
        self.writes += 1
        return sequence, entry_id(sequence), data, ttl

    def _written(self, sequence: int, type: str) -> int:
        self.next_sequence = sequence + 1
        self._fresh = False
        metrics.event_log_written()
        if type == MESSAGE_DELTA and self.first_token_since is not None:
            metrics.first_token(since=self.first_token_since)
            self.first_token_since = None
        return sequence

    def _append(self, type: str, payload: Mapping[str, Any]) -> int:
        sequence, entry_id, data, ttl = self._entry(type, payload)
        try:
            if ttl is None:
                self._client.xadd(self.key, {FIELD: data}, id=entry_id)
            else:
                # One round trip. If the XADD is refused the EXPIRE still runs, which at worst
                # resets the live writer's log TTL; its own terminal event sets it again.
                pipe = self._client.pipeline(transaction=False)
                pipe.xadd(self.key, {FIELD: data}, id=entry_id)
                pipe.expire(self.key, ttl)
                _raise_first(pipe.execute(raise_on_error=False))
        except redis.ResponseError as error:
            found = self._client.xrange(self.key, entry_id, entry_id) if _stale(error) else None
            self._check_ours(error, entry_id, data, found)
        return self._written(sequence, type)

    async def _awrite(self, type: str, payload: Mapping[str, Any]) -> int:
        # Shielded: a stop that cancels the stream lets a write in flight finish, so the
        # writer always knows whether its entry landed.
        return await asyncio.shield(self._aappend(type, payload))

    async def _aappend(self, type: str, payload: Mapping[str, Any]) -> int:
        if self._alock is None:
            self._alock = asyncio.Lock()
        async with self._alock:  # FIFO: entries keep the order their batches were taken
            sequence, entry_id, data, ttl = self._entry(type, payload)
            # Sent in one pipeline with the other streams' appends (eventlog/connections.py).
            reply = await appends_batcher().xadd(self.key, {FIELD: data}, entry_id, ttl)
            if isinstance(reply, redis.ResponseError):
                found = None
                if _stale(reply):
                    client = aioredis.Redis(connection_pool=async_pool())
                    found = await client.xrange(self.key, entry_id, entry_id)
                self._check_ours(reply, entry_id, data, found)
            return self._written(sequence, type)

    def _check_ours(
        self, error: redis.ResponseError, entry_id: str, data: str, found: list[Any] | None
    ) -> None:
        """After a refused XADD: return if the entry there is exactly ours, else raise.

        redis-py retries a command whose connection dropped: if our first attempt landed,
        the retry is refused, yet the entry there is ours. Any other holder is a rival.
        """
        if found is None:  # not a stale id: some other failure
            raise error
        if not (found and entry_json(found[0]) == data):
            sequence = entry_sequence(entry_id)
            message = f"run {self.run_id}: another writer holds sequence {sequence}"
            raise EventLogConflict(message) from error


class EventRecorder(EventWriter):
    """A run's events kept in a list instead of a log: numbered, checked and coalesced
    exactly as the log's writer does it, for a run that keeps nothing (stateless chat, a
    response with `store: false`), so its events are the ones a stored run would have."""

    def __init__(self, run_id: RunId) -> None:
        super().__init__(run_id)
        self.events: list[dict[str, Any]] = []

    def _append(self, type: str, payload: Mapping[str, Any]) -> int:
        sequence, _, data, _ = self._entry(type, payload)
        self.events.append(json.loads(data))
        self.next_sequence = sequence + 1
        return sequence

    async def _awrite(self, type: str, payload: Mapping[str, Any]) -> int:
        return self._append(type, payload)


def _stale(error: redis.ResponseError) -> bool:
    return "equal or smaller" in str(error)  # only a stale id means a rival writer


def _raise_first(results: list[Any]) -> None:
    if isinstance(results[0], Exception):
        raise results[0]
