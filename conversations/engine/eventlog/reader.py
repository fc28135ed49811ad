"""Reading a run's event log: replay from any position, then follow live with the same
cursor (XRANGE, then XREAD BLOCK from the id of the last event delivered; in asyncio
through the loop's one shared read, hub.py): no gap, no duplicate. Readers stop after the
terminal event."""

import json
import math
import time
from collections.abc import AsyncGenerator, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, overload

import redis

from conversations.engine.eventlog.connections import async_client, redis_client
from conversations.engine.eventlog.hub import Alarm, follow_hub
from conversations.engine.eventlog.keys import (
    DEFAULT_BLOCK_MS,
    ENVELOPE,
    MAX_BLOCK_MS,
    PAGE,
    Event,
    EventLogConflict,
    RunId,
    as_text,
    entry_id,
    entry_json,
    entry_sequence,
    stream_key,
)
from conversations.engine.eventlog.writer import EventWriter
from conversations.event_types import (
    MESSAGE_CREATED,
    MESSAGE_DELTA,
    TERMINAL_TYPES,
)


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


FURTHEST_POSITION = 2**62


def _entry_number(entry_id: str) -> int:
    return int(entry_id.split("-", 1)[0])


@dataclass
class _Cursor:
    """Where a reader stands: the id of the last entry delivered (or skipped), and its clock."""

    last_id: str
    block_ms: int
    deadline: float | None
    first: bool = True
    done: bool = False
    # Events at or below this sequence number are the reader's already, by its own word.
    floor: int = -1

    @classmethod
    def start(cls, after: int | None, block_ms: int, timeout: float | None) -> "_Cursor":
        if not 0 < block_ms <= MAX_BLOCK_MS:
            raise ValueError(f"block_ms must be in 1..{MAX_BLOCK_MS}")
        deadline = None if timeout is None else time.monotonic() + timeout
        if after is None:
            return cls("0-0", block_ms, deadline)
        # A position past any log there can be still makes a stream id Redis accepts.
        return cls(entry_id(min(after, FURTHEST_POSITION)), block_ms, deadline)

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

    def end_if_past(self, last: list[Any] | None) -> None:
        """After the replay, for a reader at or past the log's end (`after` beyond it). A
        log that already ended has nothing more to give: waiting would block forever. A
        live log (or one not written yet) is read on from its actual end, so its terminal
        event still ends the read even if it falls below the reader's position; events
        up to that position are not handed out."""
        end = as_text(last[0][0]) if last else "0-0"
        # Else the end is new since the replay, and XREAD delivers it.
        if _entry_number(end) > _entry_number(self.last_id):
            return
        if last and json.loads(entry_json(last[0]))["type"] in TERMINAL_TYPES:
            self.done = True
            return
        self.floor = max(self.floor, entry_sequence(self.last_id))
        self.last_id = end

    def take(self, entries: Iterable[Any] | None) -> list[Event]:
        """The new events of a page, up to and including a terminal one."""
        events: list[Event] = []
        for entry in entries or ():
            entry_id = as_text(entry[0])
            event: Event = json.loads(entry_json(entry))
            # Else it is the event at `after`, fetched only to learn whether the run has ended.
            if entry_id != self.last_id:
                self.last_id = entry_id
                if entry_sequence(entry_id) > self.floor:
                    events.append(event)
            if event["type"] in TERMINAL_TYPES:
                self.done = True
                break
        return events


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
    if not cursor.done:
        cursor.end_if_past(client.xrevrange(key, count=1))
    while not cursor.done and (wait := cursor.wait_ms()):
        response = client.xread({key: cursor.last_id}, count=PAGE, block=wait)
        yield from cursor.take(_xread_entries(response))


@overload
def events_follow(
    run_id: RunId,
    *,
    after: int | None = None,
    block_ms: int = DEFAULT_BLOCK_MS,
    timeout: float | None = None,
    idle: None = None,
    alarm: None = None,
) -> AsyncGenerator[Event]: ...


@overload
def events_follow(
    run_id: RunId,
    *,
    after: int | None = None,
    block_ms: int = DEFAULT_BLOCK_MS,
    timeout: float | None = None,
    idle: float,
    alarm: None = None,
) -> AsyncGenerator[Event | None]: ...


@overload
def events_follow(
    run_id: RunId,
    *,
    after: int | None = None,
    block_ms: int = DEFAULT_BLOCK_MS,
    timeout: float | None = None,
    idle: float | None = None,
    alarm: Alarm,
) -> AsyncGenerator[Event | Alarm | None]: ...


async def events_follow(
    run_id: RunId,
    *,
    after: int | None = None,
    block_ms: int = DEFAULT_BLOCK_MS,
    timeout: float | None = None,
    idle: float | None = None,
    alarm: Alarm | None = None,
) -> AsyncGenerator[Event | Alarm | None]:
    """`events_read` for asyncio; with `idle`, also None each time that many seconds pass
    without an event while following live (a tick of silence, counted without a task per
    event); with `alarm`, the alarm itself when it rang while following live (it cuts the
    wait short; the reader takes it). Transports use follow.run_follow, which retries,
    keeps alive and checks its caller around it."""
    if idle is not None and not idle > 0:
        raise ValueError("idle must be a positive number of seconds")
    cursor = _Cursor.start(after, block_ms, timeout)
    key = stream_key(run_id)
    client = async_client()
    while not cursor.done:
        page = await client.xrange(key, cursor.replay_min(), "+", count=PAGE) or []
        for event in cursor.take(page):
            yield event
        if len(page) < PAGE:
            break
    if not cursor.done:
        cursor.end_if_past(await client.xrevrange(key, count=1))
    if cursor.done:
        return
    # Live: the loop's one read over every followed log serves this follower too.
    subscription = follow_hub().subscribe(key, cursor.last_id)
    quiet_since = time.monotonic()
    try:
        while not cursor.done and (wait := cursor.wait_ms()):
            if idle is not None:
                tick_ms = math.ceil((quiet_since + idle - time.monotonic()) * 1000)
                wait = max(1, min(wait, tick_ms))
            events = cursor.take(await subscription.entries(wait / 1000, alarm))
            for event in events:
                yield event
            if alarm is not None and alarm.rung:
                yield alarm
            if idle is None:
                continue
            now = time.monotonic()
            if events:
                quiet_since = now
            elif now - quiet_since >= idle:
                yield None
                quiet_since = now
    finally:
        subscription.close()


def events_all(run_id: RunId, *, client: redis.Redis | None = None) -> list[Event]:
    """Every stored event of a run, without waiting for more."""
    return list(events_read(run_id, timeout=0, client=client))


def event_log_exists(run_id: RunId, *, client: redis.Redis | None = None) -> bool:
    """Whether the run's log is still there (it expires some time after the run ends)."""
    client = client if client is not None else redis_client()
    return bool(client.exists(stream_key(run_id)))


async def aevent_log_exists(run_id: RunId) -> bool:
    """`event_log_exists` for asyncio."""
    return bool(await async_client().exists(stream_key(run_id)))


def event_log_last(run_id: RunId, *, client: redis.Redis | None = None) -> Event | None:
    """The run's last event, if its log exists."""
    client = client if client is not None else redis_client()
    last = client.xrevrange(stream_key(run_id), count=1)
    return json.loads(entry_json(last[0])) if last else None


async def aevent_log_ended_by(run_id: RunId, *, after: int) -> bool:
    """Whether the run's log ends with its terminal event at or before `after`: a reader
    at that position has been told everything there will ever be."""
    last = await async_client().xrevrange(stream_key(run_id), count=1)
    if not last:
        return False
    event = json.loads(entry_json(last[0]))
    return bool(event["type"] in TERMINAL_TYPES and event["sequence_number"] <= after)


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
