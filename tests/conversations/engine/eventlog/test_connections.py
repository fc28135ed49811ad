"""Event-log appends from an event loop, batched into pipelines
(conversations.engine.eventlog.connections), against a real Redis-protocol server."""

import asyncio
import uuid

import pytest
import redis
import redis.asyncio as aioredis

from conversations.engine.eventlog import (
    MESSAGE_CREATED,
    MESSAGE_DELTA,
    RUN_COMPLETED,
    RUN_CREATED,
    RUN_IN_PROGRESS,
    EventLogConflict,
    EventWriter,
    events_all,
    message_texts,
    stream_key,
)
from conversations.engine.eventlog.connections import AppendsBatcher, appends_batcher

# Hand-made events exercise the log itself (conversations/protocol.py is not their concern).
pytestmark = pytest.mark.synthetic_events


def new_run() -> str:
    return str(uuid.uuid4())


class CountingPipelines(aioredis.Redis):
    """Counts the pipelines sent, and the commands in each."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.sizes: list[int] = []

    def pipeline(self, *args, **kwargs):
        pipe = super().pipeline(*args, **kwargs)
        execute = pipe.execute

        async def counted(*a, **k):
            self.sizes.append(len(pipe.command_stack))
            return await execute(*a, **k)

        pipe.execute = counted  # type: ignore[method-assign]
        return pipe


async def write_reply(run_id: str, words: int) -> None:
    writer = EventWriter(run_id, coalesce_ms=0)  # every delta its own entry
    await writer.aemit(RUN_CREATED, run={"id": run_id})
    await writer.aemit(MESSAGE_CREATED, message_id="m1")
    for i in range(words):
        await writer.amessage_delta("m1", f"w{i} ")
    await writer.aemit(RUN_COMPLETED, run={"id": run_id})


async def test_appends_of_concurrent_writers_share_pipelines_and_stay_in_order(redis_url):
    client = CountingPipelines(connection_pool=aioredis.ConnectionPool.from_url(redis_url))
    batcher = AppendsBatcher(client)
    runs = [new_run() for _ in range(30)]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("conversations.engine.eventlog.writer.appends_batcher", lambda: batcher)
        await asyncio.gather(*(write_reply(run_id, words=10) for run_id in runs))
    await client.aclose()
    await client.connection_pool.disconnect()

    for run_id in runs:
        logged = await asyncio.to_thread(events_all, run_id)
        assert [event["sequence_number"] for event in logged] == list(range(13))
        assert message_texts(logged) == {"m1": "".join(f"w{i} " for i in range(10))}
    entries = 30 * 13
    # Each writer waits for its last append before the next: with 30 writers in flight,
    # a round trip carries many of them.
    assert len(client.sizes) < entries / 5
    assert sum(client.sizes) == entries + 30 * 2  # the first and the terminal add an EXPIRE


async def test_a_rival_writer_is_still_refused_and_an_echo_of_ours_is_not(redis_url):
    run_id = new_run()
    stale = EventWriter(run_id)
    await stale.aemit(RUN_CREATED)
    successor = await asyncio.to_thread(EventWriter.open, run_id)
    await asyncio.to_thread(successor.emit, RUN_IN_PROGRESS)

    with pytest.raises(EventLogConflict):
        await stale.aemit(MESSAGE_CREATED, message_id="m1")
    assert stale.next_sequence == 1

    # The same entry again (redis-py resending after a lost reply) is ours: no conflict.
    twin = EventWriter(run_id)
    assert await twin.aemit(RUN_CREATED) == 0
    logged = await asyncio.to_thread(events_all, run_id)
    assert [event["type"] for event in logged] == [RUN_CREATED, RUN_IN_PROGRESS]


async def test_a_failed_round_trip_fails_its_appends_and_the_next_batch_goes_out(redis_url):
    class FailingOnce(aioredis.Redis):
        failures = 1

        def pipeline(self, *args, **kwargs):
            pipe = super().pipeline(*args, **kwargs)
            execute = pipe.execute

            async def maybe_fail(*a, **k):
                if FailingOnce.failures:
                    FailingOnce.failures -= 1
                    raise redis.ConnectionError("connection reset")
                return await execute(*a, **k)

            pipe.execute = maybe_fail  # type: ignore[method-assign]
            return pipe

    client = FailingOnce.from_url(redis_url)
    batcher = AppendsBatcher(client)
    first, second = new_run(), new_run()
    results = await asyncio.gather(
        batcher.xadd(stream_key(first), {"e": "{}"}, "1-0", None),
        batcher.xadd(stream_key(second), {"e": "{}"}, "1-0", None),
        return_exceptions=True,
    )
    assert all(isinstance(result, redis.ConnectionError) for result in results)
    assert await batcher.xadd(stream_key(first), {"e": "{}"}, "1-0", 60) == b"1-0"
    assert 0 < await client.ttl(stream_key(first)) <= 60
    assert await client.exists(stream_key(second)) == 0
    await client.delete(stream_key(first))
    await client.aclose()


async def test_an_append_still_lands_when_its_writer_is_cancelled(redis_url):
    # A stopped stream cancels its task; the shielded write in flight still completes and
    # the writer knows its entry landed (no gap on the next write).
    run_id = new_run()
    writer = EventWriter(run_id, coalesce_ms=0)
    await writer.aemit(RUN_CREATED)
    task = asyncio.ensure_future(writer.amessage_delta("m1", "hello"))
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await asyncio.sleep(0.05)
    await writer.aemit(RUN_COMPLETED)
    logged = await asyncio.to_thread(events_all, run_id)
    assert [event["type"] for event in logged] == [RUN_CREATED, MESSAGE_DELTA, RUN_COMPLETED]
    assert [event["sequence_number"] for event in logged] == [0, 1, 2]


async def test_each_event_loop_has_its_own_batcher(redis_url):
    here = appends_batcher()
    assert appends_batcher() is here
    elsewhere = await asyncio.to_thread(asyncio.run, _batcher_of_a_new_loop())
    assert elsewhere is not here


async def _batcher_of_a_new_loop() -> AppendsBatcher:
    return appends_batcher()


async def test_appends_queued_behind_a_failed_round_trip_still_go_out(redis_url):
    class SlowFailingOnce(aioredis.Redis):
        failures = 1

        def pipeline(self, *args, **kwargs):
            pipe = super().pipeline(*args, **kwargs)
            execute = pipe.execute

            async def maybe_fail(*a, **k):
                if SlowFailingOnce.failures:
                    SlowFailingOnce.failures -= 1
                    await asyncio.sleep(0.05)  # the next append queues meanwhile
                    raise redis.ConnectionError("connection reset")
                return await execute(*a, **k)

            pipe.execute = maybe_fail  # type: ignore[method-assign]
            return pipe

    client = SlowFailingOnce.from_url(redis_url)
    batcher = AppendsBatcher(client)
    first, second = new_run(), new_run()
    failing = asyncio.ensure_future(batcher.xadd(stream_key(first), {"e": "{}"}, "1-0", None))
    await asyncio.sleep(0.01)
    queued = batcher.xadd(stream_key(second), {"e": "{}"}, "1-0", None)
    assert await asyncio.wait_for(queued, 5) == b"1-0"
    with pytest.raises(redis.ConnectionError):
        await failing
    await client.delete(stream_key(second))
    await client.aclose()
