"""Replies streamed on the process's streaming loop into a run's event log (real Redis)."""

import asyncio
import time
import uuid
from collections.abc import AsyncGenerator
from typing import Any

import pytest
import redis

from conversations.engine import streaming
from conversations.engine.cancel import cancel_flag_raise, cancel_subscriber_name
from conversations.engine.eventlog import EventRecorder, EventWriter, events_all, message_texts
from conversations.engine.llm.base import Finished, ProviderError, StreamEvent, TextDelta
from tests.support.waiting import wait_until

MESSAGE_ID = "m1"


class PacedProvider:
    """Says `words` one every `pause` seconds; `stall_after` words in it stops for `stall`
    seconds; `fail_after` words in it raises a provider error."""

    name = "paced"

    def __init__(
        self,
        words: list[str],
        *,
        pause: float = 0.0,
        stall_after: int | None = None,
        stall: float = 0.0,
        fail_after: int | None = None,
    ) -> None:
        self.words, self.pause = words, pause
        self.stall_after, self.stall, self.fail_after = stall_after, stall, fail_after
        self.closed = False

    async def stream(
        self,
        *,
        model: str,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        generation: Any = None,
    ) -> AsyncGenerator[StreamEvent, None]:
        try:
            for number, word in enumerate(self.words):
                if number == self.fail_after:
                    raise ProviderError("provider_error", "The model server failed.")
                if number == self.stall_after:
                    await asyncio.sleep(self.stall)
                yield TextDelta(word)
                await asyncio.sleep(self.pause)
            yield Finished("stop")
        finally:
            self.closed = True


def reply_stream(provider: PacedProvider, run_id: str, coalesce_ms: int = 50):
    writer = EventWriter(run_id, coalesce_ms=coalesce_ms)
    return streaming.ReplyStream(
        provider=provider, model="m", messages=[], tools=[], writer=writer, message_id=MESSAGE_ID
    )


def logged_text(run_id: str) -> str:
    return message_texts(events_all(run_id)).get(MESSAGE_ID, "")


@pytest.fixture
def run_id(redis_url: str) -> str:
    return str(uuid.uuid4())


def test_a_reply_is_streamed_into_the_log(run_id):
    words = [f"w{n} " for n in range(50)]
    stream = reply_stream(PacedProvider(words, pause=0.002), run_id).start()

    result = stream.wait(timeout=10)

    assert result is not None
    assert result.reply.text == "".join(words)
    assert result.reply.finish_reason == "stop"
    assert logged_text(run_id) == "".join(words)
    deltas = [event for event in events_all(run_id) if event["type"] == "message.delta"]
    assert 1 < len(deltas) < len(words)  # coalesced, yet not held to the end
    assert [event["sequence_number"] for event in events_all(run_id)] == list(range(len(deltas)))


def test_text_held_by_a_stalled_model_reaches_the_log_within_a_window(run_id):
    # "Hello" goes out at once; " world" waits for the window, and the model then stalls.
    provider = PacedProvider(["Hello", " world", "!"], stall_after=2, stall=2.0)
    stream = reply_stream(provider, run_id, coalesce_ms=100).start()

    time.sleep(0.5)

    assert logged_text(run_id) == "Hello world"
    result = stream.wait(timeout=5)
    assert result is not None
    assert logged_text(run_id) == "Hello world!"


def test_a_stop_ends_the_stream_keeps_the_text_and_closes_the_upstream(run_id):
    provider = PacedProvider([f"w{n} " for n in range(1000)], pause=0.005)
    stream = reply_stream(provider, run_id).start()
    time.sleep(0.2)

    stream.stop()
    result = stream.wait(timeout=5)

    assert result is not None
    assert result.stopped
    assert 0 < len(result.reply.text) < len("".join(provider.words))
    assert logged_text(run_id) == result.reply.text  # pending deltas were written
    assert provider.closed


def test_a_stop_during_a_stall_takes_effect_at_once(run_id):
    provider = PacedProvider(["Hello", " world"], stall_after=1, stall=30.0)
    stream = reply_stream(provider, run_id).start()
    time.sleep(0.2)

    begun = time.monotonic()
    stream.stop()
    result = stream.wait(timeout=5)

    assert time.monotonic() - begun < 1
    assert result is not None
    assert result.stopped
    assert result.reply.text == "Hello"
    assert provider.closed


def test_a_discarding_stop_writes_nothing_more(run_id):
    # A lost lease: another worker owns the log now.
    provider = PacedProvider(["a", "b", "c"], stall_after=2, stall=30.0)
    stream = reply_stream(provider, run_id, coalesce_ms=60_000).start()
    time.sleep(0.2)  # "a" is written at once, "b" waits for the (hour-long) window

    stream.stop(discard=True)
    result = stream.wait(timeout=5)

    assert result is not None
    assert result.reply.text == "ab"
    assert logged_text(run_id) == "a"


def test_a_provider_error_is_the_result_and_the_text_so_far_is_logged(run_id):
    provider = PacedProvider(["Hel", "lo", "never"], fail_after=2)

    result = reply_stream(provider, run_id, coalesce_ms=60_000).start().wait(timeout=5)

    assert result is not None
    assert result.error is not None
    assert result.error.code == "provider_error"
    assert logged_text(run_id) == "Hello"


def test_many_replies_share_the_loop_without_mixing(redis_url):
    runs = {str(uuid.uuid4()): [f"{n}-{i} " for i in range(30)] for n in range(20)}
    streams = {
        run_id: reply_stream(PacedProvider(words, pause=0.003), run_id).start()
        for run_id, words in runs.items()
    }

    results = {run_id: stream.wait(timeout=10) for run_id, stream in streams.items()}

    for run_id, words in runs.items():
        result = results[run_id]
        assert result is not None
        assert result.reply.text == "".join(words)
        assert logged_text(run_id) == "".join(words)


# --- stop requests broadcast to the streaming loop -------------------------------------


def cancel_subscriptions(redis_url: str) -> set[str]:
    """Ids of this process's connections subscribed to stop requests."""
    clients = redis.Redis.from_url(redis_url).client_list(_type="pubsub")
    return {str(c["id"]) for c in clients if c.get("name") == cancel_subscriber_name()}


def started_with_text(provider: PacedProvider, run_id: str, redis_url: str):
    """A stream under way, with some text logged and the loop listening for stops."""
    stream = reply_stream(provider, run_id).start()
    wait_until(lambda: bool(cancel_subscriptions(redis_url)), what="the stop subscription")
    wait_until(lambda: bool(logged_text(run_id)), what="the first words")
    return stream


def test_a_broadcast_stop_ends_the_stream_at_once_and_keeps_the_text(run_id, redis_url):
    provider = PacedProvider([f"w{n} " for n in range(1000)], pause=0.01)  # 10 s of reply
    stream = started_with_text(provider, run_id, redis_url)

    begun = time.monotonic()
    cancel_flag_raise(run_id=run_id)  # what run_cancel does
    result = stream.wait(timeout=5)

    # Not the step's once-a-second check: nothing here polls the flag.
    assert time.monotonic() - begun < 0.5
    assert result is not None
    assert result.stopped
    assert 0 < len(result.reply.text) < len("".join(provider.words))
    assert logged_text(run_id) == result.reply.text
    assert provider.closed


def test_a_broadcast_stop_for_another_run_leaves_the_stream_alone(redis_url):
    kept, stopped = str(uuid.uuid4()), str(uuid.uuid4())
    kept_words = [f"k{n} " for n in range(100)]
    kept_stream = started_with_text(PacedProvider(kept_words, pause=0.01), kept, redis_url)
    stopped_provider = PacedProvider([f"s{n} " for n in range(1000)], pause=0.01)
    stopped_stream = started_with_text(stopped_provider, stopped, redis_url)

    cancel_flag_raise(run_id=stopped)

    stopped_result = stopped_stream.wait(timeout=5)
    kept_result = kept_stream.wait(timeout=10)
    assert stopped_result is not None
    assert stopped_result.stopped
    assert kept_result is not None
    assert not kept_result.stopped
    assert kept_result.reply.text == "".join(kept_words)


def test_the_stop_subscription_comes_back_after_its_connection_drops(run_id, redis_url):
    warm_up = reply_stream(PacedProvider(["hi"]), str(uuid.uuid4())).start()
    assert warm_up.wait(timeout=5) is not None  # the loop subscribes with its first reply
    wait_until(lambda: bool(cancel_subscriptions(redis_url)), what="the stop subscription")
    before = cancel_subscriptions(redis_url)

    redis.Redis.from_url(redis_url).client_kill_filter(_type="pubsub")
    wait_until(
        lambda: (
            bool(cancel_subscriptions(redis_url)) and not cancel_subscriptions(redis_url) & before
        ),
        what="a new subscription",
    )
    provider = PacedProvider([f"w{n} " for n in range(1000)], pause=0.01)
    stream = started_with_text(provider, run_id, redis_url)
    begun = time.monotonic()
    cancel_flag_raise(run_id=run_id)
    result = stream.wait(timeout=5)

    assert time.monotonic() - begun < 0.5
    assert result is not None
    assert result.stopped


def test_a_reply_streams_into_a_recorder_without_a_log():
    recorder = EventRecorder(uuid.uuid4())
    stream = streaming.ReplyStream(
        provider=PacedProvider(["Hi", " there"]),
        model="m",
        messages=[],
        tools=[],
        writer=recorder,
        message_id="m1",
        follow_stops=False,
    )
    result = stream.start().future.result(timeout=5)

    assert result.reply.text == "Hi there"
    assert result.reply.finish_reason == "stop"
    assert message_texts(recorder.events) == {"m1": "Hi there"}
    assert [event["sequence_number"] for event in recorder.events] == list(
        range(len(recorder.events))
    )
