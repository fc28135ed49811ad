"""The per-run event log, against a real Redis-protocol server (the `redis_url` fixture)."""

import asyncio
import threading
import time
import uuid
from typing import Any

import pytest
import redis

from conversations.engine.eventlog import (
    MESSAGE_COMPLETED,
    MESSAGE_CREATED,
    MESSAGE_DELTA,
    RUN_COMPLETED,
    RUN_CREATED,
    RUN_FAILED,
    RUN_IN_PROGRESS,
    TERMINAL_TYPES,
    TOOL_CALL_ARGUMENTS_DELTA,
    TOOL_CALL_COMPLETED,
    TOOL_CALL_CREATED,
    TOOL_RESULT_COMPLETED,
    EventLogConflict,
    EventWriter,
    event_log_ensure_terminal,
    event_log_last,
    events_all,
    message_texts,
    stream_key,
)
from conversations.engine.eventlog.reader import events_follow, events_read

# Hand-made events exercise the log itself (conversations/protocol.py is not their concern).
pytestmark = pytest.mark.synthetic_events

HOUR_MS = 3_600_000


@pytest.fixture
def run_id(redis_url: str) -> str:
    # A fresh run per test: tests share the server and never flush it.
    return str(uuid.uuid4())


@pytest.fixture
def client(redis_url: str):
    connection = redis.Redis.from_url(redis_url)
    yield connection
    connection.close()


def write_run(run_id: str, *, words: int = 40, pause_every: int = 0, **options: Any) -> int:
    """A whole run as the runner writes it (a tool call, then a reply); returns the event count."""
    writer = EventWriter.open(run_id, **options)
    writer.emit(RUN_CREATED, run={"id": run_id, "status": "queued"})
    writer.emit(RUN_IN_PROGRESS)
    writer.emit(TOOL_CALL_CREATED, call_id="c1", name="calculator")
    for piece in ('{"expr"', ': "6*7"', "}"):
        writer.tool_arguments_delta("c1", piece)
    writer.emit(TOOL_CALL_COMPLETED, call_id="c1", name="calculator", arguments='{"expr": "6*7"}')
    writer.emit(TOOL_RESULT_COMPLETED, call_id="c1", output="42", is_error=False)
    writer.emit(MESSAGE_CREATED, message_id="m1")
    for i in range(words):
        writer.message_delta("m1", f"w{i} ")
        if pause_every and i % pause_every == 0:
            time.sleep(0.005)  # let followers catch up, so they also read live
    writer.emit(MESSAGE_COMPLETED, message={"id": "m1", "content": "..."})
    writer.emit(RUN_COMPLETED, run={"id": uuid.UUID(run_id), "status": "completed"})
    return writer.next_sequence


def follow_in_thread(run_id: str, **options: Any) -> tuple[threading.Thread, list[dict[str, Any]]]:
    received: list[dict[str, Any]] = []

    def follow() -> None:
        received.extend(events_read(run_id, block_ms=100, timeout=5, **options))

    thread = threading.Thread(target=follow)
    thread.start()
    return thread, received


def sequences(events: list[dict[str, Any]]) -> list[int]:
    return [event["sequence_number"] for event in events]


# --- writing ---------------------------------------------------------------------------


def test_sequence_is_gapless_across_writers_opened_in_turn(run_id):
    first = EventWriter.open(run_id)
    assert first.emit(RUN_CREATED) == 0
    first.message_delta("m1", "Hel")
    assert first.emit(RUN_IN_PROGRESS) == 2  # the pending delta took 1
    # The next step (or a retry after a crash) continues where the log ends.
    second = EventWriter.open(run_id)
    assert second.next_sequence == 3
    assert second.emit(MESSAGE_CREATED, message_id="m2") == 3
    assert second.emit(RUN_COMPLETED, run={}) == 4

    events = events_all(run_id)
    assert sequences(events) == [0, 1, 2, 3, 4]
    assert {event["run_id"] for event in events} == {run_id}
    assert events[1] == {
        "type": MESSAGE_DELTA,
        "run_id": run_id,
        "sequence_number": 1,
        "message_id": "m1",
        "delta": "Hel",
    }


def test_stream_entry_ids_follow_sequence_numbers(run_id, client):
    write_run(run_id, words=3)
    ids = [entry_id for entry_id, _ in client.xrange(stream_key(run_id))]
    assert ids == [f"{n + 1}-0".encode() for n in range(len(ids))]


def test_a_stale_writer_is_refused(run_id):
    stale = EventWriter.open(run_id)
    stale.emit(RUN_CREATED)
    successor = EventWriter.open(run_id)  # took over, e.g. after the first was thought dead
    successor.emit(RUN_IN_PROGRESS)
    never_wrote = EventWriter(run_id)  # first write: the XADD + safety EXPIRE pipeline

    with pytest.raises(EventLogConflict):
        stale.emit(MESSAGE_CREATED, message_id="m1")
    with pytest.raises(EventLogConflict):
        stale.emit(RUN_FAILED, run={})  # terminal: the XADD + EXPIRE pipeline
    with pytest.raises(EventLogConflict):
        never_wrote.emit(RUN_CREATED, run={"id": run_id})

    assert stale.next_sequence == 1
    assert [event["type"] for event in events_all(run_id)] == [RUN_CREATED, RUN_IN_PROGRESS]


def test_an_entry_that_is_exactly_ours_is_not_a_conflict(run_id, redis_url):
    class RetryingRedis(redis.Redis):
        """Sends every XADD twice, as redis-py's retry does when a reply is lost."""

        def xadd(self, *args, **kwargs):
            super().xadd(*args, **kwargs)
            return super().xadd(*args, **kwargs)

    client = RetryingRedis.from_url(redis_url)
    writer = EventWriter(run_id, client=client)
    writer.emit(RUN_CREATED)
    assert writer.emit(RUN_IN_PROGRESS) == 1  # the echo is refused by Redis, yet it is ours
    assert sequences(events_all(run_id)) == [0, 1]
    client.close()
    # So is an identical event from another writer: harmless, and it is fenced at the first
    # event that differs.
    twin = EventWriter(run_id)
    assert twin.emit(RUN_CREATED) == 0
    with pytest.raises(EventLogConflict):
        twin.emit(MESSAGE_CREATED, message_id="m1")
    assert sequences(events_all(run_id)) == [0, 1]


def test_bad_events_are_refused_before_writing(run_id):
    writer = EventWriter(run_id)
    with pytest.raises(ValueError, match="unknown event type"):
        writer.emit("run.exploded")
    with pytest.raises(TypeError, match="reserved"):
        writer.emit(RUN_CREATED, sequence_number=7)
    assert events_all(run_id) == []
    assert writer.writes == 0


def test_many_tiny_deltas_coalesce_into_a_few_writes(run_id, settings):
    settings.PARLEY_EVENT_COALESCE_MS = HOUR_MS
    settings.PARLEY_EVENT_COALESCE_CHARS = 400
    writer = EventWriter.open(run_id)
    writer.emit(MESSAGE_CREATED, message_id="m1")
    pieces = [f"t{i} " for i in range(200)]  # 890 characters
    for piece in pieces:
        writer.message_delta("m1", piece)
    writer.emit(RUN_COMPLETED, run={})

    events = events_all(run_id)
    deltas = [event for event in events if event["type"] == MESSAGE_DELTA]
    # The first at once (the reply starts without delay), two full at 400 characters, and
    # the rest flushed by the terminal event.
    assert len(deltas) == 4
    assert deltas[0]["delta"] == "t0 "
    assert all(len(event["delta"]) < 400 + 5 for event in deltas)
    assert message_texts(events) == {"m1": "".join(pieces)}
    assert writer.writes == len(events) == 6


def test_a_zero_time_window_writes_every_delta(run_id, settings):
    settings.PARLEY_EVENT_COALESCE_MS = 0
    writer = EventWriter.open(run_id)
    for i in range(50):
        writer.message_delta("m1", f"t{i} ")
    deltas = [event["delta"] for event in events_all(run_id)]
    assert deltas == [f"t{i} " for i in range(50)]
    assert writer.writes == 50


def test_the_character_limit_flushes(run_id):
    writer = EventWriter(run_id, coalesce_ms=HOUR_MS, coalesce_chars=10)
    for _ in range(6):
        writer.message_delta("m1", "abcd")
    # The first delta at once, then 12 buffered characters pass the limit of 10.
    assert [event["delta"] for event in events_all(run_id)] == ["abcd", "abcdabcdabcd"]
    assert writer.flush() == 2
    assert writer.flush() is None
    assert [event["delta"] for event in events_all(run_id)] == [
        "abcd",
        "abcdabcdabcd",
        "abcdabcd",
    ]


def test_the_time_window_flushes_on_the_next_delta(run_id):
    now = [0.0]
    writer = EventWriter(run_id, coalesce_ms=50, coalesce_chars=10_000, clock=lambda: now[0])
    writer.message_delta("m1", "a")  # nothing written for a while: out at once
    assert writer.pending_age() is None
    now[0] = 0.01
    writer.message_delta("m1", "b")
    now[0] = 0.04
    assert writer.pending_age() == pytest.approx(0.03)
    assert [event["delta"] for event in events_all(run_id)] == ["a"]
    now[0] = 0.06  # a window since the last write: this delta goes out with the buffered one
    writer.message_delta("m1", "c")
    writer.message_delta("m1", "d")
    now[0] = 5.0  # the next delta a window later takes the held one along
    writer.message_delta("m1", "e")
    now[0] = 10.0  # after a quiet spell the next delta is immediate again
    writer.message_delta("m1", "f")
    assert [event["delta"] for event in events_all(run_id)] == ["a", "bc", "de", "f"]


def test_another_target_or_event_flushes_pending_deltas_first(run_id):
    writer = EventWriter(run_id, coalesce_ms=HOUR_MS)
    writer.message_delta("m1", "Hel")
    writer.message_delta("m1", "lo")
    writer.tool_arguments_delta("c1", '{"q":')
    writer.tool_arguments_delta("c1", '"cats"}')
    writer.tool_arguments_delta("c2", "{}")
    writer.message_delta("m1", "!")
    writer.emit(TOOL_CALL_COMPLETED, call_id="c1", name="search", arguments='{"q":"cats"}')

    got = [
        (event["type"], event.get("message_id") or event.get("call_id"), event.get("delta"))
        for event in events_all(run_id)
    ]
    assert got == [
        (MESSAGE_DELTA, "m1", "Hel"),  # the first delta goes out at once
        (MESSAGE_DELTA, "m1", "lo"),
        (TOOL_CALL_ARGUMENTS_DELTA, "c1", '{"q":"cats"}'),
        (TOOL_CALL_ARGUMENTS_DELTA, "c2", "{}"),
        (MESSAGE_DELTA, "m1", "!"),
        (TOOL_CALL_COMPLETED, "c1", None),
    ]


def test_the_terminal_event_sets_the_ttl(run_id, client, settings):
    settings.PARLEY_EVENT_TTL_SECONDS = 120
    writer = EventWriter.open(run_id)
    writer.emit(RUN_CREATED)
    assert client.ttl(stream_key(run_id)) > 120  # the long safety TTL of an unfinished log
    writer.emit(RUN_COMPLETED, run={})
    assert 0 < client.ttl(stream_key(run_id)) <= 120
    assert writer.writes == 2  # each XADD + EXPIRE pipeline is one round trip


# --- reading ---------------------------------------------------------------------------


def test_replay_from_any_point_returns_exactly_the_later_events(run_id):
    count = write_run(run_id, coalesce_ms=0)
    everything = events_all(run_id)
    assert sequences(everything) == list(range(count))
    assert list(events_read(run_id, timeout=1)) == everything
    for after in range(-1, count):
        assert list(events_read(run_id, after=after, timeout=1)) == everything[after + 1 :]


def test_a_reader_after_the_terminal_event_ends_at_once(run_id):
    count = write_run(run_id)
    started = time.monotonic()
    assert list(events_read(run_id, after=count - 1)) == []  # no timeout: must not block
    assert time.monotonic() - started < 1


@pytest.mark.parametrize("beyond", [0, 1, 100])
async def test_an_async_reader_at_or_past_the_end_ends_at_once(run_id, beyond):
    # A socket's `subscribe` with `after` past the end reads with this: it must not wait.
    count = await asyncio.to_thread(write_run, run_id)
    follower = events_follow(run_id, after=count - 1 + beyond)  # no timeout
    assert await asyncio.wait_for(anext(follower, None), timeout=2) is None


@pytest.mark.parametrize("written", [0, 2], ids=["log-not-written-yet", "live-log"])
def test_a_reader_ahead_of_a_live_log_ends_with_the_run(run_id, written):
    """`after` beyond what a live run has written: the reader gets only events past its
    position, and the run's end still ends the read, though it comes below that position."""
    writer = EventWriter(run_id, next_sequence=0)
    for _ in range(written):
        writer.emit(RUN_IN_PROGRESS)
    thread, received = follow_in_thread(run_id, after=3)
    time.sleep(0.3)
    assert thread.is_alive()
    for _ in range(5 - written):
        writer.emit(RUN_IN_PROGRESS)  # sequence numbers up to 4
    writer.emit(RUN_COMPLETED, run={"id": run_id})  # 5
    started = time.monotonic()
    thread.join(timeout=5)
    assert time.monotonic() - started < 1  # at the end, not at the reader's timeout
    assert sequences(received) == [4, 5]

    early_end = str(uuid.uuid4())
    writer = EventWriter(early_end, next_sequence=0)
    thread, received = follow_in_thread(early_end, after=50)
    time.sleep(0.3)
    writer.emit(RUN_CREATED, run={"id": early_end})
    writer.emit(RUN_COMPLETED, run={"id": early_end})
    started = time.monotonic()
    thread.join(timeout=5)
    assert time.monotonic() - started < 1
    assert received == []


def test_followers_started_before_and_during_the_run_get_every_event_once(run_id):
    writer = EventWriter.open(run_id, coalesce_ms=0)
    early, early_events = follow_in_thread(run_id)
    time.sleep(0.05)  # blocked in XREAD on a log that does not exist yet
    writer.emit(RUN_CREATED)
    writer.emit(MESSAGE_CREATED, message_id="m1")
    for i in range(700):  # more than a replay page
        writer.message_delta("m1", f"w{i} ")
    middle, middle_events = follow_in_thread(run_id)
    middle_after, middle_after_events = follow_in_thread(run_id, after=3)
    for i in range(700, 1000):
        writer.message_delta("m1", f"w{i} ")
        if i % 50 == 0:
            time.sleep(0.005)
    writer.emit(RUN_COMPLETED, run={})
    for thread in (early, middle, middle_after):
        thread.join(5)

    count = writer.next_sequence
    assert sequences(early_events) == sequences(middle_events) == list(range(count))
    assert sequences(middle_after_events) == list(range(4, count))
    assert early_events == middle_events
    assert early_events[-1]["type"] == RUN_COMPLETED
    assert message_texts(early_events) == {"m1": "".join(f"w{i} " for i in range(1000))}


def test_a_follower_gives_up_quietly_after_the_timeout(run_id):
    EventWriter.open(run_id).emit(RUN_CREATED)
    started = time.monotonic()
    got = list(events_read(run_id, timeout=0.3, block_ms=100))
    assert 0.25 < time.monotonic() - started < 2
    assert [event["type"] for event in got] == [RUN_CREATED]
    assert list(events_read(str(uuid.uuid4()), timeout=0.1)) == []


def test_block_must_be_bounded(run_id):
    with pytest.raises(ValueError, match="block_ms"):
        next(events_read(run_id, block_ms=0))


def test_other_client_shapes_read_and_write_alike(run_id, redis_url):
    # decode_responses answers str; RESP3 answers XREAD as a dict.
    text_client = redis.Redis.from_url(redis_url, decode_responses=True)
    resp3_client = redis.Redis.from_url(redis_url, protocol=3)
    follower, received = follow_in_thread(run_id, client=resp3_client)
    time.sleep(0.05)
    count = write_run(run_id, words=10, pause_every=3, coalesce_ms=0, client=text_client)
    follower.join(5)
    assert sequences(received) == list(range(count))
    assert received == events_all(run_id, client=text_client)
    text_client.close()
    resp3_client.close()


async def collect(run_id: str, **options: Any) -> list[dict[str, Any]]:
    return [event async for event in events_follow(run_id, block_ms=100, timeout=5, **options)]


async def test_the_async_follower_gets_what_the_sync_one_gets(run_id):
    early = asyncio.create_task(collect(run_id))
    await asyncio.sleep(0.05)
    count = await asyncio.to_thread(write_run, run_id, words=300, pause_every=50, coalesce_ms=0)
    received = await asyncio.wait_for(early, 5)
    assert sequences(received) == list(range(count))
    assert received == await asyncio.to_thread(events_all, run_id)
    assert await collect(run_id, after=count - 3) == received[-2:]
    assert await collect(run_id, after=count - 1) == []


async def test_followers_in_one_event_loop_share_their_connections(run_id):
    # A web process follows a run per open socket; opening a connection per follower
    # cost the event loop more than the reads themselves.
    from conversations.engine.eventlog.connections import async_pool

    count = await asyncio.to_thread(write_run, run_id, words=20, coalesce_ms=0)
    for _ in range(5):  # one after another: each reuses the connection the last returned
        assert len(await collect(run_id, after=count - 3)) == 2
    pool = async_pool()
    assert len(pool._available_connections) + len(pool._in_use_connections) == 1
    together = await asyncio.gather(*(collect(run_id) for _ in range(3)))
    assert all(sequences(events) == list(range(count)) for events in together)
    assert len(pool._available_connections) + len(pool._in_use_connections) <= 3
    await pool.disconnect()


async def test_the_async_follower_times_out_quietly(run_id):
    await asyncio.to_thread(lambda: EventWriter.open(run_id).emit(RUN_CREATED))
    started = time.monotonic()
    got = [event async for event in events_follow(run_id, block_ms=50, timeout=0.2)]
    assert [event["type"] for event in got] == [RUN_CREATED]
    assert time.monotonic() - started < 2


# --- repair and reconstruction ---------------------------------------------------------


def test_ensure_terminal_appends_exactly_once(run_id, client):
    writer = EventWriter.open(run_id)
    writer.emit(RUN_CREATED)
    writer.emit(RUN_IN_PROGRESS)
    writer.message_delta("m1", "half a rep")
    writer.flush()  # ... and the worker died before its terminal event
    terminal = {"type": RUN_FAILED, "run": {"id": run_id, "status": "failed"}}

    assert event_log_ensure_terminal(run_id, terminal) is True
    assert event_log_ensure_terminal(run_id, terminal) is False
    events = events_all(run_id)
    assert [event["type"] in TERMINAL_TYPES for event in events] == [False] * 3 + [True]
    assert events[-1] == {**terminal, "run_id": run_id, "sequence_number": 3}
    assert event_log_last(run_id) == events[-1]
    assert client.ttl(stream_key(run_id)) > 0


def test_ensure_terminal_leaves_a_finished_log_alone(run_id):
    count = write_run(run_id, words=2)
    assert event_log_ensure_terminal(run_id, {"type": RUN_FAILED, "run": {}}) is False
    assert len(events_all(run_id)) == count
    with pytest.raises(ValueError, match="terminal"):
        event_log_ensure_terminal(run_id, {"type": RUN_IN_PROGRESS})
    assert event_log_last(str(uuid.uuid4())) is None


def test_message_texts_restarts_a_message_created_again():
    def delta(message_id: str, text: str) -> dict[str, Any]:
        return {"type": MESSAGE_DELTA, "message_id": message_id, "delta": text}

    events = [
        {"type": MESSAGE_CREATED, "message_id": "m1"},
        delta("m1", "Hel"),
        delta("m1", "lo wo"),
        # The step crashed and was retried: the same message streams again from the start.
        {"type": MESSAGE_CREATED, "message_id": "m1"},
        delta("m1", "Hello"),
        delta("m1", " world"),
        {"type": MESSAGE_CREATED, "message_id": "m2"},
        {"type": TOOL_CALL_ARGUMENTS_DELTA, "call_id": "c1", "delta": "{}"},
        delta("m2", "Bye"),
    ]
    assert message_texts(events) == {"m1": "Hello world", "m2": "Bye"}


def test_message_texts_from_a_retried_step_in_the_log(run_id):
    crashed = EventWriter.open(run_id, coalesce_ms=0)
    crashed.emit(MESSAGE_CREATED, message_id="m1")
    crashed.message_delta("m1", "The answer is 4")
    retry = EventWriter.open(run_id, coalesce_ms=0)
    retry.emit(MESSAGE_CREATED, message_id="m1")
    for piece in ("The answer ", "is 42."):
        retry.message_delta("m1", piece)
    assert message_texts(events_all(run_id)) == {"m1": "The answer is 42."}


def test_more_writers_than_redis_connections_wait_instead_of_failing(redis_url, settings):
    # A worker runs a step per thread; with more threads than pooled connections a write
    # once failed ("Too many connections") and crashed the step.
    from conversations.engine.eventlog import connections

    settings.PARLEY_REDIS_MAX_CONNECTIONS = 2
    connections._sync_pools.clear()
    run_ids = [str(uuid.uuid4()) for _ in range(16)]
    failures: list[BaseException] = []

    def write(run_id: str) -> None:
        try:
            writer = EventWriter(run_id, coalesce_ms=0)
            for n in range(20):
                writer.message_delta("m1", f"t{n} ")
        except BaseException as error:  # any failure fails the test
            failures.append(error)

    threads = [threading.Thread(target=write, args=(run_id,)) for run_id in run_ids]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30)
        assert failures == []
        assert all(len(events_all(run_id)) == 20 for run_id in run_ids)
        assert connections._sync_pools[redis_url].max_connections == 2
    finally:
        connections._sync_pools.clear()  # later tests get a pool of the default size
