"""The one run follower every door uses (eventlog.run_follow and its sync face), against a
real Redis-protocol server: replay then live, keep-alives, the caller's right to follow,
and Redis failing or restarting underneath."""

import asyncio
import threading
import time
import uuid
from typing import Any

import pytest
import redis

from conversations.background_loop import loop_run
from conversations.engine.eventlog import (
    KEEP_ALIVE,
    MESSAGE_CREATED,
    RUN_COMPLETED,
    RUN_CREATED,
    EventWriter,
    StreamLost,
    events_all,
    run_follow,
    run_follow_sync,
)
from conversations.engine.eventlog import follow as follow_module
from conversations.engine.eventlog import hub as hub_module

# Hand-made events exercise the log itself (conversations/protocol.py is not their concern).
pytestmark = pytest.mark.synthetic_events


def sequences(items: list[Any]) -> list[int]:
    return [item["sequence_number"] for item in items if isinstance(item, dict)]


def started(run_id: str, deltas: int = 0) -> EventWriter:
    """A run's log with its first events, as a worker writes them."""
    writer = EventWriter.open(run_id, coalesce_ms=0)
    writer.emit(RUN_CREATED, run={"id": run_id})
    writer.emit(MESSAGE_CREATED, message_id="m")
    for number in range(deltas):
        writer.message_delta("m", f"w{number} ")
    return writer


def later(seconds: float, action: Any) -> threading.Thread:
    def run() -> None:
        time.sleep(seconds)
        action()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


async def collect(follower: Any, *, limit: float = 20) -> list[Any]:
    async def each() -> list[Any]:
        return [item async for item in follower]

    return await asyncio.wait_for(each(), limit)


@pytest.fixture
def run_id(redis_url: str) -> str:
    return str(uuid.uuid4())


async def test_replay_then_live_with_no_gap_and_no_duplicate(run_id):
    writer = await asyncio.to_thread(started, run_id, 3)

    def the_rest() -> None:
        for number in range(3, 10):
            writer.message_delta("m", f"w{number} ")
            time.sleep(0.01)
        writer.emit(RUN_COMPLETED, run={"id": run_id})

    later(0.2, the_rest)
    got = await collect(run_follow(run_id, keepalive=5))

    assert got == await asyncio.to_thread(events_all, run_id)
    assert sequences(got) == list(range(13))
    assert got[-1]["type"] == RUN_COMPLETED  # and the follower ended with it


@pytest.mark.parametrize("after", [None, -1, 0, 4, 11])
async def test_a_follower_resumes_after_its_cursor(run_id, after):
    writer = await asyncio.to_thread(started, run_id, 5)
    later(0.2, lambda: writer.emit(RUN_COMPLETED, run={"id": run_id}))

    got = await collect(run_follow(run_id, after=after))

    first = 0 if after is None else after + 1
    assert sequences(got) == list(range(first, 8))


async def test_a_cursor_at_or_past_the_end_of_a_finished_log_ends_at_once(run_id):
    writer = await asyncio.to_thread(started, run_id)
    await asyncio.to_thread(writer.emit, RUN_COMPLETED, run={"id": run_id})
    for after in (2, 3, 10**30):
        assert await collect(run_follow(run_id, after=after, keepalive=5), limit=2) == []


async def test_keep_alives_fill_a_silence_and_only_a_silence(run_id):
    writer = await asyncio.to_thread(started, run_id)

    def reply() -> None:
        writer.message_delta("m", "At last.")
        writer.emit(RUN_COMPLETED, run={"id": run_id})

    later(0.55, reply)
    got = await collect(run_follow(run_id, keepalive=0.1))

    kinds = ["beat" if item is KEEP_ALIVE else item["type"] for item in got]
    beats = [n for n, kind in enumerate(kinds) if kind == "beat"]
    assert len(beats) >= 3, kinds
    # Between the first two events and the reply: the silence, and nowhere else.
    assert kinds[:2] == [RUN_CREATED, MESSAGE_CREATED]
    assert kinds[-2:] == ["message.delta", RUN_COMPLETED]
    assert beats == list(range(2, len(kinds) - 2))


async def test_no_keep_alives_unless_asked_for(run_id):
    writer = await asyncio.to_thread(started, run_id)
    later(0.4, lambda: writer.emit(RUN_COMPLETED, run={"id": run_id}))
    got = await collect(run_follow(run_id))
    assert all(isinstance(item, dict) for item in got)
    assert sequences(got) == [0, 1, 2]


async def test_the_follower_stops_after_the_terminal_event(run_id):
    writer = await asyncio.to_thread(started, run_id)
    await asyncio.to_thread(writer.emit, RUN_COMPLETED, run={"id": run_id})
    await asyncio.to_thread(writer.emit, MESSAGE_CREATED, message_id="late")  # never read
    got = await collect(run_follow(run_id, keepalive=5), limit=2)
    assert [item["type"] for item in got] == [RUN_CREATED, MESSAGE_CREATED, RUN_COMPLETED]


async def test_a_silent_log_ends_quietly_at_the_timeout(run_id):
    await asyncio.to_thread(started, run_id)
    begun = time.monotonic()
    got = await collect(run_follow(run_id, timeout=0.4))
    assert sequences(got) == [0, 1]
    assert 0.35 < time.monotonic() - begun < 3


async def test_the_follower_stops_at_a_silence_when_the_caller_may_no_longer_follow(run_id):
    await asyncio.to_thread(started, run_id)
    answers = [True, True, False]
    asked = []

    async def still_allowed() -> bool:
        asked.append(time.monotonic())
        return answers[len(asked) - 1]

    got = await collect(run_follow(run_id, keepalive=0.1, still_allowed=still_allowed))

    assert len(asked) == 3
    # Two keep-alives while allowed; at the third silence it says no and nothing follows.
    assert got[2:] == [KEEP_ALIVE, KEEP_ALIVE]
    assert sequences(got) == [0, 1]


async def test_a_busy_log_is_checked_too_and_stops_before_the_next_event(run_id):
    """A caller whose key is revoked while the reply streams on without a pause gets no
    more of it after the next check, not only at the next silence."""
    writer = await asyncio.to_thread(started, run_id)

    def stream() -> None:
        for number in range(100):
            writer.message_delta("m", f"w{number} ")
            time.sleep(0.02)
        writer.emit(RUN_COMPLETED, run={"id": run_id})

    allowed = True

    async def still_allowed() -> bool:
        return allowed

    follower = run_follow(run_id, keepalive=0.15, still_allowed=still_allowed)
    later(0, stream)
    got: list[Any] = []
    async for item in follower:
        got.append(item)
        if len(got) == 10:
            allowed = False  # revoked mid-reply
    assert KEEP_ALIVE not in got  # the reply never paused
    assert got[-1]["type"] == "message.delta"
    assert len(got) < 40  # well before the reply's 103 events


async def test_still_allowed_needs_a_keepalive_to_be_asked_at(run_id):
    async def always() -> bool:
        return True

    with pytest.raises(ValueError, match="give keepalive"):
        run_follow(run_id, still_allowed=always)
    with pytest.raises(ValueError, match="positive"):
        run_follow(run_id, keepalive=0)


def flaky_reads(monkeypatch: pytest.MonkeyPatch, *, sends: list[int]) -> list[int | None]:
    """The follower's reads fail as a dropped connection does after `sends[i]` events on
    try i (tries past the list work); returns the `after` of every try."""
    real, calls = follow_module.events_follow, []

    async def read(run_id: str, *, after: int | None = None, **options: Any) -> Any:
        calls.append(after)
        budget = sends[len(calls) - 1] if len(calls) <= len(sends) else None
        async for event in real(run_id, after=after, **options):
            if budget == 0:
                raise redis.ConnectionError("Connection reset by peer")
            yield event
            budget = None if budget is None else budget - 1
        if budget is not None:
            raise ConnectionResetError("Connection reset by peer")

    monkeypatch.setattr(follow_module, "events_follow", read)
    return calls


async def test_redis_errors_are_retried_from_the_last_event_delivered(run_id, monkeypatch):
    writer = await asyncio.to_thread(started, run_id, 3)
    await asyncio.to_thread(writer.emit, RUN_COMPLETED, run={"id": run_id})
    calls = flaky_reads(monkeypatch, sends=[2, 0, 3])
    monkeypatch.setattr(follow_module, "RETRY_DELAYS", (0.01, 0.01))

    got = await collect(run_follow(run_id))

    assert got == await asyncio.to_thread(events_all, run_id)
    # A try that delivered something starts the count of failures again.
    assert calls == [None, 1, 1, 4]


async def test_redis_staying_away_ends_the_follower_with_where_to_resume(run_id, monkeypatch):
    writer = await asyncio.to_thread(started, run_id, 3)
    await asyncio.to_thread(writer.emit, RUN_COMPLETED, run={"id": run_id})
    calls = flaky_reads(monkeypatch, sends=[3, 0, 0, 0])
    monkeypatch.setattr(follow_module, "RETRY_DELAYS", (0.01, 0.01))

    got = await collect(run_follow(run_id, keepalive=5))

    assert sequences(got) == [0, 1, 2]
    assert got[-1] == StreamLost(run_id=run_id, after=2)
    assert calls == [None, 2, 2]  # the first try and two retries, then it gave up


async def test_a_redis_restart_mid_stream_is_ridden_out(event_log_redis, monkeypatch):
    """The server goes away for a second and comes back empty; the worker writes on from
    where it was, and the follower delivers every event it writes, once."""
    monkeypatch.setattr(follow_module, "RETRY_DELAYS", (0.1, 0.2, 0.4, 0.8, 1.6, 3.2))
    run_id = str(uuid.uuid4())
    await asyncio.to_thread(started, run_id, 3)
    got: list[Any] = []

    async def follow() -> None:
        async for item in run_follow(run_id, keepalive=0.2, timeout=30):
            got.append(item)

    following = asyncio.create_task(follow())
    await asyncio.sleep(0.3)
    assert sequences(got) == [0, 1, 2, 3, 4]
    await asyncio.to_thread(event_log_redis.restart, down_seconds=1)

    def write_on() -> None:
        writer = EventWriter(run_id, next_sequence=5, coalesce_ms=0)
        for number in range(3, 6):
            writer.message_delta("m", f"w{number} ")
        writer.emit(RUN_COMPLETED, run={"id": run_id})

    await asyncio.sleep(0.5)
    await asyncio.to_thread(write_on)
    await asyncio.wait_for(following, 20)

    assert sequences(got) == list(range(9))
    assert got[-1]["type"] == RUN_COMPLETED
    assert not any(isinstance(item, StreamLost) for item in got)


# --- the sync face ------------------------------------------------------------------------


def test_the_sync_face_follows_the_same_way(run_id):
    writer = started(run_id, 2)
    later(0.3, lambda: writer.emit(RUN_COMPLETED, run={"id": run_id}))
    got: list[Any] = list(run_follow_sync(run_id, after=0, keepalive=0.1))
    assert sequences(got) == [1, 2, 3, 4]
    assert KEEP_ALIVE in got
    assert got[-1]["type"] == RUN_COMPLETED


def test_the_sync_face_asks_on_the_callers_thread_and_stops_at_no(run_id):
    started(run_id)
    threads = []

    def still_allowed() -> bool:
        threads.append(threading.get_ident())
        return len(threads) < 2

    got = list(run_follow_sync(run_id, keepalive=0.1, still_allowed=still_allowed))

    assert threads == [threading.get_ident()] * 2
    assert got == [*events_all(run_id), KEEP_ALIVE]


async def _hub_followers() -> int:
    return sum(len(subs) for subs in hub_module.follow_hub()._subscriptions.values())


def test_leaving_the_sync_face_early_leaves_the_shared_read(run_id):
    started(run_id)
    for item in run_follow_sync(run_id, keepalive=0.1):
        if item is KEEP_ALIVE:
            break  # a client that went away
    assert loop_run(_hub_followers()) == 0


def test_the_sync_face_ends_at_the_timeout(run_id):
    begun = time.monotonic()
    assert list(run_follow_sync(run_id, timeout=0.3)) == []
    assert 0.25 < time.monotonic() - begun < 3


def test_an_unexpected_error_reaches_the_sync_caller(run_id, monkeypatch):
    async def broken(run_id: str, **options: Any) -> Any:
        raise ValueError("not a Redis failure")
        yield  # an async generator, as the reader is

    monkeypatch.setattr(follow_module, "events_follow", broken)
    with pytest.raises(ValueError, match="not a Redis failure"):
        list(run_follow_sync(run_id, keepalive=5))


async def test_the_sync_face_refuses_to_block_an_event_loop(run_id):
    with pytest.raises(RuntimeError, match="use run_follow"):
        next(run_follow_sync(run_id))


# --- checks called for early: a notice, a permission that lapses ---------------------------


class Notices:
    """A recheck source as the doors' (accounts.stream_notices): `notify()` from any thread
    calls for a check on the follower's loop while it listens."""

    def __init__(self) -> None:
        self.listening: list[tuple[asyncio.AbstractEventLoop, Any]] = []
        self.entered = threading.Event()
        self.left = threading.Event()

    def __call__(self, on_notice: Any) -> Any:
        notices = self

        class Listening:
            async def __aenter__(self) -> None:
                notices.listening.append((asyncio.get_running_loop(), on_notice))
                notices.entered.set()

            async def __aexit__(self, *exc: object) -> None:
                notices.listening.clear()
                notices.left.set()

        return Listening()

    def notify(self) -> None:
        for loop, on_notice in list(self.listening):
            loop.call_soon_threadsafe(on_notice)


async def test_a_notice_calls_for_a_check_at_once_not_at_the_next_keep_alive(run_id):
    await asyncio.to_thread(started, run_id)
    notices, answers = Notices(), [True, False]
    asked: list[float] = []

    async def still_allowed() -> bool:
        asked.append(time.monotonic())
        return answers[len(asked) - 1]

    follower = run_follow(run_id, keepalive=60, still_allowed=still_allowed, recheck=notices)
    later(0.5, notices.notify)
    begun = time.monotonic()
    got = await collect(follower, limit=5)

    # Once on listening (a notice sent before went to nobody), once at the notice.
    assert len(asked) == 2
    assert 0.4 < asked[1] - begun < 1.5
    assert sequences(got) == [0, 1]
    assert KEEP_ALIVE not in got
    assert notices.left.is_set()  # it stopped listening


async def test_a_notice_while_events_stream_is_checked_before_the_next_event(run_id):
    writer = await asyncio.to_thread(started, run_id)
    notices, allowed = Notices(), True

    async def still_allowed() -> bool:
        return allowed

    def stream() -> None:
        for number in range(100):
            writer.message_delta("m", f"w{number} ")
            time.sleep(0.02)
        writer.emit(RUN_COMPLETED, run={"id": run_id})

    follower = run_follow(run_id, keepalive=60, still_allowed=still_allowed, recheck=notices)
    writing = later(0, stream)
    got: list[Any] = []
    async for item in follower:
        got.append(item)
        if len(got) == 10:
            allowed = False  # revoked mid-reply, and the notice sent
            notices.notify()
    # The reply is written to its end, so its events land in this test and no later one.
    await asyncio.to_thread(writing.join)
    assert 10 <= len(got) < 20  # the reply had 103 events


async def test_many_events_ask_nothing_without_a_notice(run_id):
    writer = await asyncio.to_thread(started, run_id, 200)
    writer.emit(RUN_COMPLETED, run={"id": run_id})
    asked: list[float] = []

    async def still_allowed() -> bool:
        asked.append(time.monotonic())
        return True

    got = await collect(
        run_follow(run_id, keepalive=60, still_allowed=still_allowed, recheck=Notices())
    )
    assert len(sequences(got)) == 203
    assert len(asked) == 1  # the one check on listening


async def test_a_permission_that_lapses_is_asked_about_again_when_it_does(run_id):
    """A session's expiry: the answer says how long it holds, and the follower asks again
    then, not at the next keep-alive."""
    await asyncio.to_thread(started, run_id)
    answers: list[bool | float] = [0.4, 0.3, False]
    asked: list[float] = []

    async def still_allowed() -> bool | float:
        asked.append(time.monotonic())
        return answers[len(asked) - 1]

    begun = time.monotonic()
    follower = run_follow(run_id, keepalive=60, still_allowed=still_allowed, recheck=Notices())
    got = await collect(follower, limit=5)

    assert len(asked) == 3
    assert 0.35 < asked[1] - asked[0] < 1.0
    assert 0.25 < asked[2] - asked[1] < 1.0
    assert time.monotonic() - begun < 2
    assert sequences(got) == [0, 1]


async def test_a_lapse_past_the_next_keep_alive_is_left_to_that_check(run_id):
    await asyncio.to_thread(started, run_id)
    asked: list[float] = []

    async def still_allowed() -> bool | float:
        asked.append(time.monotonic())
        return len(asked) < 3 and 3600.0

    got = await collect(
        run_follow(run_id, keepalive=0.2, still_allowed=still_allowed, recheck=Notices())
    )
    assert len(asked) == 3  # on listening, then at two silences
    assert got[2:] == [KEEP_ALIVE]


async def test_a_recheck_needs_still_allowed(run_id):
    with pytest.raises(ValueError, match="give still_allowed"):
        run_follow(run_id, keepalive=1, recheck=Notices())


def test_the_sync_face_hears_notices_too_and_asks_on_the_callers_thread(run_id):
    started(run_id)
    notices = Notices()
    threads: list[int] = []

    def still_allowed() -> bool:
        threads.append(threading.get_ident())
        return len(threads) < 2

    def notify_once_listening() -> None:
        notices.entered.wait(5)
        time.sleep(0.3)
        notices.notify()

    later(0, notify_once_listening)
    begun = time.monotonic()
    got = list(run_follow_sync(run_id, keepalive=60, still_allowed=still_allowed, recheck=notices))

    assert time.monotonic() - begun < 2
    assert threads == [threading.get_ident()] * 2
    assert got == events_all(run_id)
    assert notices.left.wait(5)


def test_the_sync_face_asks_again_when_the_permission_lapses(run_id):
    started(run_id)
    answers: list[bool | float] = [0.3, False]
    asked: list[float] = []

    def still_allowed() -> bool | float:
        asked.append(time.monotonic())
        return answers[len(asked) - 1]

    got = list(
        run_follow_sync(run_id, keepalive=60, still_allowed=still_allowed, recheck=Notices())
    )

    assert len(asked) == 2
    assert 0.25 < asked[1] - asked[0] < 1.0
    assert got == events_all(run_id)
