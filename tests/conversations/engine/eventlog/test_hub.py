"""Many followers in one event loop share one blocking read (eventlog/hub.py), against a
real Redis-protocol server: every follower still gets every event once and in order."""

import asyncio
import time
import uuid
from typing import Any

import pytest
import redis.asyncio as aioredis

from conversations.engine.eventlog import (
    MESSAGE_CREATED,
    RUN_COMPLETED,
    RUN_CREATED,
    EventWriter,
    events_all,
)
from conversations.engine.eventlog import hub as hub_module
from conversations.engine.eventlog.reader import events_follow

# Hand-made events exercise the log itself (conversations/protocol.py is not their concern).
pytestmark = pytest.mark.synthetic_events


def sequences(events: list[dict[str, Any]]) -> list[int]:
    return [event["sequence_number"] for event in events]


async def follow(run_id: str, **options: Any) -> list[dict[str, Any]]:
    return [event async for event in events_follow(run_id, timeout=20, **options)]


class Runs:
    """Run logs written from a thread, a few events at a time, as workers write them."""

    def __init__(self, count: int) -> None:
        self.ids = [str(uuid.uuid4()) for _ in range(count)]
        self.writers: dict[str, EventWriter] = {}

    def start(self) -> None:
        for run_id in self.ids:
            writer = self.writers[run_id] = EventWriter.open(run_id, coalesce_ms=0)
            writer.emit(RUN_CREATED, run={"id": run_id})
            writer.emit(MESSAGE_CREATED, message_id="m")

    def deltas(self, rounds: int) -> None:
        for i in range(rounds):
            for writer in self.writers.values():
                writer.message_delta("m", f"w{i} ")
            time.sleep(0.01)

    def end(self) -> None:
        for run_id, writer in self.writers.items():
            writer.emit(RUN_COMPLETED, run={"id": run_id})


@pytest.fixture
def xreads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many streams each XREAD sent from this process asked for."""
    asked: list[int] = []
    real = aioredis.Redis.execute_command

    async def counted(self: Any, *args: Any, **options: Any) -> Any:
        if args[0] == "XREAD":  # XREAD COUNT n BLOCK ms STREAMS key... id...
            asked.append((len(args) - 6) // 2)
        return await real(self, *args, **options)

    monkeypatch.setattr(aioredis.Redis, "execute_command", counted)
    return asked


async def test_many_followers_get_every_event_once_through_shared_reads(redis_url, xreads):
    runs = Runs(40)
    await asyncio.to_thread(runs.start)
    followers = [asyncio.create_task(follow(run_id)) for run_id in runs.ids]
    await asyncio.sleep(0.1)
    await asyncio.to_thread(runs.deltas, 15)
    await asyncio.to_thread(runs.end)
    received = await asyncio.wait_for(asyncio.gather(*followers), 20)
    for run_id, events in zip(runs.ids, received, strict=True):
        assert events == await asyncio.to_thread(events_all, run_id)
        assert sequences(events) == list(range(18))
    # 40 logs x 16 live events: a read per follower per event would be 640 reads. Shared,
    # one read covers every log (and the hub's wake stream) and answers with whatever
    # they gathered meanwhile (how much depends on timing: only "fewer" is certain).
    assert max(xreads) > 40
    assert len(xreads) < 640


async def test_two_followers_of_one_run_at_different_positions(redis_url):
    runs = Runs(1)
    (run_id,) = runs.ids
    await asyncio.to_thread(runs.start)
    early = asyncio.create_task(follow(run_id))
    await asyncio.to_thread(runs.deltas, 10)
    # Joins while the first is live and ahead of where it starts: it replays, then both
    # share the hub's read of the same log.
    late = asyncio.create_task(follow(run_id, after=3))
    replayed = asyncio.create_task(follow(run_id))
    await asyncio.to_thread(runs.deltas, 10)
    await asyncio.to_thread(runs.end)
    got_early, got_late, got_replayed = await asyncio.wait_for(
        asyncio.gather(early, late, replayed), 20
    )
    count = 2 + 20 + 1
    assert sequences(got_early) == list(range(count))
    assert sequences(got_replayed) == list(range(count))
    assert sequences(got_late) == list(range(4, count))


async def test_a_new_follower_does_not_wait_out_the_shared_block(redis_url, monkeypatch):
    monkeypatch.setattr(hub_module, "BLOCK_MS", 20_000)
    quiet, busy = Runs(1), Runs(1)
    await asyncio.to_thread(quiet.start)
    await asyncio.to_thread(busy.start)
    # The hub is blocked on the quiet run's log when the second follower arrives.
    waiting = asyncio.create_task(follow(quiet.ids[0]))
    await asyncio.sleep(0.2)
    newcomer = asyncio.create_task(follow(busy.ids[0]))
    await asyncio.sleep(0.1)
    started = time.monotonic()
    await asyncio.to_thread(busy.end)
    got = await asyncio.wait_for(newcomer, 20)
    assert [event["type"] for event in got][-1] == RUN_COMPLETED
    assert time.monotonic() - started < 5  # not the 20 s block
    await asyncio.to_thread(quiet.end)
    assert sequences(await asyncio.wait_for(waiting, 20)) == [0, 1, 2]


async def test_a_failed_read_reaches_every_follower_and_a_retry_resumes(redis_url, monkeypatch):
    runs = Runs(3)
    await asyncio.to_thread(runs.start)
    real = aioredis.Redis.execute_command
    failures = [1]

    async def failing(self: Any, *args: Any, **options: Any) -> Any:
        if args[0] == "XREAD" and failures and failures.pop():
            await asyncio.sleep(0.05)
            raise aioredis.ConnectionError("connection lost")
        return await real(self, *args, **options)

    monkeypatch.setattr(aioredis.Redis, "execute_command", failing)

    async def follow_with_retry(run_id: str) -> tuple[list[dict[str, Any]], int]:
        received: list[dict[str, Any]] = []
        errors = 0
        while True:
            after = received[-1]["sequence_number"] if received else None
            try:
                async for event in events_follow(run_id, after=after, timeout=20):
                    received.append(event)
                return received, errors
            except aioredis.ConnectionError:
                errors += 1

    followers = [asyncio.create_task(follow_with_retry(run_id)) for run_id in runs.ids]
    await asyncio.sleep(0.2)
    await asyncio.to_thread(runs.deltas, 5)
    await asyncio.to_thread(runs.end)
    results = await asyncio.wait_for(asyncio.gather(*followers), 20)
    for received, errors in results:
        assert errors == 1  # each follower heard of the one failed read
        assert sequences(received) == list(range(8))  # and lost nothing after it


async def test_followers_leave_the_hub_when_they_end(redis_url):
    runs = Runs(5)
    await asyncio.to_thread(runs.start)
    followers = [asyncio.create_task(follow(run_id)) for run_id in runs.ids]
    await asyncio.sleep(0.1)
    followers[0].cancel()  # a socket closed mid-reply
    await asyncio.to_thread(runs.end)
    await asyncio.wait_for(asyncio.gather(*followers[1:]), 20)
    hub = hub_module.follow_hub()
    assert hub._subscriptions == {}
    for _ in range(100):  # the blocked read is woken to end, well before its 10 s block
        if hub._reader is None:
            break
        await asyncio.sleep(0.02)
    assert hub._reader is None  # nothing left to read for


async def test_commands_packed_in_c_take_what_redis_py_takes(redis_url):
    from conversations.engine.eventlog.connections import async_client

    client = async_client()
    key = f"parley:test:{uuid.uuid4().hex}"
    # A command name of two words, numbers, bytes and a memoryview all reach Redis intact.
    assert await client.execute_command("CLIENT SETNAME", "follow-hub-test")
    await client.rpush(key, 1, 2.5, b"raw", memoryview(b"view"), "text")
    assert await client.lrange(key, 0, -1) == [b"1", b"2.5", b"raw", b"view", b"text"]
    with pytest.raises(aioredis.DataError):
        await client.rpush(key, None)  # type: ignore[arg-type]  # refused before it is sent
    await client.delete(key)
