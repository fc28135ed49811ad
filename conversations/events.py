"""The per-run event log, on a Redis Stream.

Key `parley:run:<run_id>:events`, entry id `<sequence_number + 1>-0`, one field `e` holding the
JSON event `{"type", "run_id", "sequence_number", ...payload}`; numbered per run from 0, gapless.
Explicit ids also fence writers: Redis refuses an id not greater than the last one, so a stale
second writer gets `EventLogConflict` instead of interleaving. Writers coalesce deltas
(PARLEY_EVENT_COALESCE_MS / _CHARS): the first delta after a quiet spell is written at once,
later ones at most once per window, so a reply starts without delay and a fast one costs a
few writes a second, not one per token; the
terminal event sets the TTL (PARLEY_EVENT_TTL_SECONDS), and each writer's first write a long
safety TTL, so an abandoned log never lives forever. Readers replay (XRANGE) from any sequence
number, then follow live (XREAD BLOCK) from the same cursor, the id of the last event delivered:
no gap, no duplicate. They stop after the terminal event.

Client rule for rebuilding replies (`message_texts`): concatenate `message.delta` per
`message_id`; a `message.created` for a message id already seen throws its text away and starts
it again, since a step retried after a worker crash re-streams the same message from the start.
"""

import asyncio
import json
import math
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

import redis
import redis.asyncio as aioredis
from django.conf import settings
from django.core.serializers.json import DjangoJSONEncoder

from conversations.redis_async import SOCKET_TIMEOUT, appends_batcher, async_pool

RUN_CREATED = "run.created"
RUN_IN_PROGRESS = "run.in_progress"
MESSAGE_CREATED = "message.created"
MESSAGE_DELTA = "message.delta"
TOOL_CALL_CREATED = "tool_call.created"
TOOL_CALL_ARGUMENTS_DELTA = "tool_call.arguments.delta"
TOOL_CALL_COMPLETED = "tool_call.completed"
TOOL_RESULT_COMPLETED = "tool_result.completed"
MESSAGE_COMPLETED = "message.completed"
DRAFT_UPDATED = "draft.updated"
RUN_COMPLETED = "run.completed"
RUN_FAILED = "run.failed"
RUN_CANCELLED = "run.cancelled"
RUN_INCOMPLETE = "run.incomplete"

TERMINAL_TYPES = frozenset({RUN_COMPLETED, RUN_FAILED, RUN_CANCELLED, RUN_INCOMPLETE})
EVENT_TYPES = TERMINAL_TYPES | {
    *(RUN_CREATED, RUN_IN_PROGRESS, MESSAGE_CREATED, MESSAGE_DELTA, TOOL_CALL_CREATED),
    *(TOOL_CALL_ARGUMENTS_DELTA, TOOL_CALL_COMPLETED, TOOL_RESULT_COMPLETED, MESSAGE_COMPLETED),
    DRAFT_UPDATED,
}
ENVELOPE = frozenset({"type", "run_id", "sequence_number"})

FIELD = "e"
SAFETY_TTL_SECONDS = 7 * 24 * 3600
PAGE = 500
DEFAULT_BLOCK_MS = 5000
MAX_BLOCK_MS = 20_000

Event = dict[str, Any]
RunId = str | UUID


class EventLogConflict(Exception):
    """Another writer holds this sequence number with another event: this writer is stale."""


def stream_key(run_id: RunId) -> str:
    return f"parley:run:{run_id}:events"


_pools: dict[str, redis.BlockingConnectionPool] = {}
_pools_lock = threading.Lock()


def redis_client() -> redis.Redis:
    """A client on this process's pool for settings.REDIS_URL (read per call: tests change it)."""
    url = settings.REDIS_URL
    with _pools_lock:
        pool = _pools.get(url)
        if pool is None:
            # Blocking: a worker with more threads than connections waits its turn for
            # one instead of failing the step (redis-py 8 caps a plain pool and raises).
            pool = _pools[url] = redis.BlockingConnectionPool.from_url(
                url,
                socket_timeout=SOCKET_TIMEOUT,
                max_connections=settings.PARLEY_REDIS_MAX_CONNECTIONS,
                timeout=SOCKET_TIMEOUT,
            )
    return redis.Redis(connection_pool=pool)


# --- entries ---------------------------------------------------------------------------


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _entry_id(sequence: int) -> str:
    return f"{sequence + 1}-0"


def _sequence(entry_id: Any) -> int:
    return int(_text(entry_id).partition("-")[0]) - 1


def _raw(entry: Any) -> str:
    fields = entry[1]
    # Clients made with decode_responses=True answer str keys.
    return _text(fields[FIELD.encode()] if FIELD.encode() in fields else fields[FIELD])


def _xread_entries(response: Any) -> list[Any]:
    """The entries of our one stream from an XREAD answer, in any shape redis-py gives it."""
    if not response:
        return []
    if isinstance(response, dict):  # RESP3: {key: entries} or {key: [entries]}
        (entries,) = response.values()
    else:  # RESP2: [[key, entries]]
        entries = response[0][1]
    if entries and isinstance(entries[0], list) and isinstance(entries[0][0], tuple | list):
        entries = entries[0]
    return list(entries)


@dataclass
class _Cursor:
    """Where a reader stands: the id of the last entry delivered (or skipped), and its clock."""

    last_id: str
    block_ms: int
    deadline: float | None
    first: bool = True
    done: bool = False

    @classmethod
    def start(cls, after: int | None, block_ms: int, timeout: float | None) -> "_Cursor":
        if not 0 < block_ms <= MAX_BLOCK_MS:
            raise ValueError(f"block_ms must be in 1..{MAX_BLOCK_MS}")
        deadline = None if timeout is None else time.monotonic() + timeout
        return cls("0-0" if after is None else _entry_id(after), block_ms, deadline)

    def replay_min(self) -> str:
        # The first page includes the entry at `after`: a finished run then ends the read at once.
        first, self.first = self.first, False
        return self.last_id if first and self.last_id != "0-0" else f"({self.last_id}"

    def wait_ms(self) -> int:
        """How long the next XREAD may block; 0 means the time is up (never BLOCK 0: forever)."""
        if self.deadline is None:
            return self.block_ms
        left = self.deadline - time.monotonic()
        return 0 if left <= 0 else max(1, min(self.block_ms, math.ceil(left * 1000)))

    def take(self, entries: Iterable[Any] | None) -> list[Event]:
        """The new events of a page, up to and including a terminal one."""
        events: list[Event] = []
        for entry in entries or ():
            entry_id = _text(entry[0])
            event: Event = json.loads(_raw(entry))
            # Else it is the event at `after`, fetched only to learn whether the run has ended.
            if entry_id != self.last_id:
                self.last_id = entry_id
                events.append(event)
            if event["type"] in TERMINAL_TYPES:
                self.done = True
                break
        return events


# --- writing ---------------------------------------------------------------------------


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
    (conversations/streaming.py), which owns the writer while a reply streams. Async writes
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
        self._client = client if client is not None else redis_client()
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

    @classmethod
    def open(
        cls, run_id: RunId, *, client: redis.Redis | None = None, **options: Any
    ) -> "EventWriter":
        """A writer continuing the log after its last event (a new step, or after a crash);
        `options` as for the constructor."""
        client = client if client is not None else redis_client()
        last = client.xrevrange(stream_key(run_id), count=1)
        next_sequence = _sequence(last[0][0]) + 1 if last else 0
        return cls(run_id, next_sequence=next_sequence, client=client, **options)

    # --- sync (a step's thread) ---

    def emit(self, type: str, /, **payload: Any) -> int:
        """Append one event after any pending deltas; returns its sequence number."""
        self.flush()
        return self._append(type, payload)

    def message_delta(self, message_id: str, text: str) -> None:
        for batch in self._delta(MESSAGE_DELTA, "message_id", message_id, text):
            self._append(*batch)

    def tool_arguments_delta(self, call_id: str, text: str) -> None:
        for batch in self._delta(TOOL_CALL_ARGUMENTS_DELTA, "call_id", call_id, text):
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
        return sequence, _entry_id(sequence), data, ttl

    def _written(self, sequence: int) -> int:
        self.next_sequence = sequence + 1
        self._fresh = False
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
        return self._written(sequence)

    async def _awrite(self, type: str, payload: Mapping[str, Any]) -> int:
        # Shielded: a stop that cancels the stream lets a write in flight finish, so the
        # writer always knows whether its entry landed.
        return await asyncio.shield(self._aappend(type, payload))

    async def _aappend(self, type: str, payload: Mapping[str, Any]) -> int:
        if self._alock is None:
            self._alock = asyncio.Lock()
        async with self._alock:  # FIFO: entries keep the order their batches were taken
            sequence, entry_id, data, ttl = self._entry(type, payload)
            # Sent in one pipeline with the other streams' appends (redis_async).
            reply = await appends_batcher().xadd(self.key, {FIELD: data}, entry_id, ttl)
            if isinstance(reply, redis.ResponseError):
                found = None
                if _stale(reply):
                    client = aioredis.Redis(connection_pool=async_pool())
                    found = await client.xrange(self.key, entry_id, entry_id)
                self._check_ours(reply, entry_id, data, found)
            return self._written(sequence)

    def _check_ours(
        self, error: redis.ResponseError, entry_id: str, data: str, found: list[Any] | None
    ) -> None:
        """After a refused XADD: return if the entry there is exactly ours, else raise.

        redis-py retries a command whose connection dropped: if our first attempt landed,
        the retry is refused, yet the entry there is ours. Any other holder is a rival.
        """
        if found is None:  # not a stale id: some other failure
            raise error
        if not (found and _raw(found[0]) == data):
            sequence = _sequence(entry_id)
            message = f"run {self.run_id}: another writer holds sequence {sequence}"
            raise EventLogConflict(message) from error


def _stale(error: redis.ResponseError) -> bool:
    return "equal or smaller" in str(error)  # only a stale id means a rival writer


def _raise_first(results: list[Any]) -> None:
    if isinstance(results[0], Exception):
        raise results[0]


# --- reading ---------------------------------------------------------------------------


def events_read(
    run_id: RunId,
    *,
    after: int | None = None,
    block_ms: int = DEFAULT_BLOCK_MS,
    timeout: float | None = None,
    client: redis.Redis | None = None,
) -> Iterator[Event]:
    """Events with sequence_number > after (all without `after`): the stored ones, then live
    ones, ending after the terminal event, or quietly once `timeout` seconds have passed."""
    cursor = _Cursor.start(after, block_ms, timeout)
    client = client if client is not None else redis_client()
    key = stream_key(run_id)
    while not cursor.done:
        page = client.xrange(key, cursor.replay_min(), "+", count=PAGE) or []
        yield from cursor.take(page)
        if len(page) < PAGE:
            break
    while not cursor.done and (wait := cursor.wait_ms()):
        response = client.xread({key: cursor.last_id}, count=PAGE, block=wait)
        yield from cursor.take(_xread_entries(response))


async def events_follow(
    run_id: RunId,
    *,
    after: int | None = None,
    block_ms: int = DEFAULT_BLOCK_MS,
    timeout: float | None = None,
) -> AsyncIterator[Event]:
    """`events_read` for asyncio (websocket consumers, the SSE view)."""
    cursor = _Cursor.start(after, block_ms, timeout)
    key = stream_key(run_id)
    client = aioredis.Redis(connection_pool=async_pool())
    try:
        while not cursor.done:
            page = await client.xrange(key, cursor.replay_min(), "+", count=PAGE) or []
            for event in cursor.take(page):
                yield event
            if len(page) < PAGE:
                break
        while not cursor.done and (wait := cursor.wait_ms()):
            response = await client.xread({key: cursor.last_id}, count=PAGE, block=wait)
            for event in cursor.take(_xread_entries(response)):
                yield event
    finally:
        await client.aclose()


def events_all(run_id: RunId, *, client: redis.Redis | None = None) -> list[Event]:
    """Every stored event of a run, without waiting for more."""
    return list(events_read(run_id, timeout=0, client=client))


def event_log_exists(run_id: RunId, *, client: redis.Redis | None = None) -> bool:
    """Whether the run's log is still there (it expires some time after the run ends)."""
    client = client if client is not None else redis_client()
    return bool(client.exists(stream_key(run_id)))


async def aevent_log_exists(run_id: RunId) -> bool:
    """`event_log_exists` for asyncio."""
    client = aioredis.Redis(connection_pool=async_pool())
    try:
        return bool(await client.exists(stream_key(run_id)))
    finally:
        await client.aclose()


def event_log_last(run_id: RunId, *, client: redis.Redis | None = None) -> Event | None:
    """The run's last event, if its log exists."""
    client = client if client is not None else redis_client()
    last = client.xrevrange(stream_key(run_id), count=1)
    return json.loads(_raw(last[0])) if last else None


def event_log_ensure_terminal(
    run_id: RunId, event: Mapping[str, Any], *, client: redis.Redis | None = None
) -> bool:
    """Append a terminal event unless the log already ends with one (the watchdog's repair
    when a worker died between finishing a run and saying so). True when it appended."""
    if event.get("type") not in TERMINAL_TYPES:
        raise ValueError(f"not a terminal event: {event.get('type')!r}")
    payload = {key: value for key, value in event.items() if key not in ENVELOPE}
    client = client if client is not None else redis_client()
    for _attempt in range(5):
        last = event_log_last(run_id, client=client)
        if last is not None and last["type"] in TERMINAL_TYPES:
            return False
        next_sequence = 0 if last is None else last["sequence_number"] + 1
        writer = EventWriter(run_id, next_sequence=next_sequence, client=client)
        try:
            writer.emit(event["type"], **payload)
        except EventLogConflict:
            continue  # someone appended meanwhile (maybe the terminal event): look again
        return True
    raise EventLogConflict(f"run {run_id}: the log kept moving; no terminal event added")


def message_texts(events: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """Each message's text so far; `message.created` again for a message restarts it."""
    parts: dict[str, list[str]] = {}
    for event in events:
        if event["type"] == MESSAGE_CREATED:
            parts[event["message_id"]] = []
        elif event["type"] == MESSAGE_DELTA:
            parts.setdefault(event["message_id"], []).append(event["delta"])
    return {message_id: "".join(texts) for message_id, texts in parts.items()}
