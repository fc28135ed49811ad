"""The server's own fields with a reply (system_fingerprint, timings, a router's provider):
kept, merged over the stream's chunks with later chunks winning, and bounded, so a hostile
server cannot bloat the stored rows. The real SDK against the fake upstream over HTTP."""

import json
from typing import Any

from conversations.engine.llm.base import (
    Finished,
    ProviderFields,
    StreamAccumulator,
    StreamEvent,
    TextDelta,
    UsageReported,
    storable_event,
)
from conversations.engine.llm.openai_provider import OpenAIProvider
from conversations.engine.llm.openai_sse import ChunkTranslator
from conversations.engine.llm.provider_fields import (
    FIELDS_MAX,
    TOTAL_MAX_BYTES,
    VALUE_MAX_BYTES,
)
from tests.support.fake_openai import FakeOpenAI, Script
from tests.support.streams import drain

MESSAGES = [{"role": "user", "content": "Hi"}]
TIMINGS = {"prompt_n": 12, "prompt_ms": 30.5, "predicted_n": 3, "predicted_per_second": 41.2}


def collect(fake: FakeOpenAI) -> tuple[list[StreamEvent], StreamAccumulator]:
    provider = OpenAIProvider(
        api_key="sk-test", base_url=fake.base_url, timeout=5.0, max_retries=2, backoff_base=0.01
    )
    events = drain(provider.stream(model="m", messages=MESSAGES, tools=[]), closing=provider)
    reply = StreamAccumulator()
    for event in events:
        reply.add(storable_event(event))  # as the runner stores them
    return events, reply


def test_extra_fields_of_every_chunk_are_kept_and_later_chunks_win(fake_openai: FakeOpenAI):
    fake_openai.push(
        Script(
            text=["Hel", "lo"],
            chunk_fields={
                # Every chunk: a router names the upstream; OpenAI's random padding.
                "*": {"provider": "Groq", "obfuscation": "k3Xq"},
                "text": {"system_fingerprint": "fp_first"},
                # llama.cpp reports its timings on the last chunk; the fingerprint changed.
                "finish": {"system_fingerprint": "fp_last", "timings": TIMINGS},
                # A null means "not said in this chunk": it erases nothing.
                "usage": {"provider": None, "system_fingerprint": "fp_last"},
            },
            choice_fields={"finish": {"stop_reason": "###", "native_finish_reason": "end_turn"}},
        )
    )

    _, reply = collect(fake_openai)

    assert reply.text == "Hello"
    assert reply.provider_payload(reply.finish_reason) == {
        "provider": "Groq",
        "system_fingerprint": "fp_last",
        "timings": TIMINGS,
        "choice": {"stop_reason": "###", "native_finish_reason": "end_turn"},
        "finish_reason": "stop",
    }


def test_our_finish_reason_wins_over_a_field_of_that_name(fake_openai: FakeOpenAI):
    fake_openai.push(Script(text="Hi", chunk_fields={"*": {"finish_reason": "upstream says"}}))

    _, reply = collect(fake_openai)

    assert reply.provider_payload("cancelled")["finish_reason"] == "cancelled"


def test_fields_before_the_first_token_do_not_stop_a_retry(fake_openai: FakeOpenAI):
    # The first answer breaks right after its opening chunk, which carried only fields:
    # nothing of the reply reached the caller, so the call is retried.
    fake_openai.push(
        Script(text="Lost", cut_after_chunks=1, chunk_fields={"role": {"provider": "A"}}),
        Script(text="Recovered", chunk_fields={"*": {"provider": "B"}}),
    )

    events, reply = collect(fake_openai)

    assert reply.text == "Recovered"
    assert reply.provider_payload("stop")["provider"] == "B"
    assert len(fake_openai.requests) == 2
    assert isinstance(events[0], TextDelta)  # the reply still starts with its text


def test_fields_are_announced_after_the_reply_starts_and_before_usage():
    def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> dict[str, Any]:
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
        return {
            "id": "c",
            "object": "chat.completion.chunk",
            "model": "m",
            **extra,
            "choices": [choice],
        }

    translator = ChunkTranslator()
    events: list[StreamEvent] = []
    for piece in (
        chunk({"role": "assistant"}, system_fingerprint="fp_1"),
        chunk({"content": "Hi"}, system_fingerprint="fp_1"),
        chunk({"content": "!"}, system_fingerprint="fp_1"),  # unchanged: not announced again
        chunk({}, "stop", timings=TIMINGS),
        {
            "id": "c",
            "choices": [],
            "usage": {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3},
        },
    ):
        events += translator.feed(piece)
    events += translator.finish()

    assert events == [
        TextDelta("Hi"),
        ProviderFields(reply={"system_fingerprint": "fp_1"}),
        TextDelta("!"),
        ProviderFields(reply={"system_fingerprint": "fp_1", "timings": TIMINGS}),
        UsageReported(1, 2, 3),
        Finished("stop"),
    ]


def test_a_hostile_servers_fields_are_bounded_and_made_storable(fake_openai: FakeOpenAI):
    nested: Any = "bottom"
    for _ in range(30):
        nested = {"deeper": nested}
    hostile = {
        "huge": "x" * 1_000_000,  # a megabyte of "metadata"
        "huge_list": list(range(200_000)),
        "deep": nested,
        "not_a_number": float("nan"),  # sent as NaN: Python's json reads it
        "too_big": 2**80,  # no export could be imported with it
        "n" * 200: "a name longer than any real field's",
        "nul\x00": "a\x00b\ud800",
        "fine": {"a": [1, 2.5, True, None, "ok"]},
    }
    hostile |= {f"made_up_{i}": i for i in range(200)}
    fake_openai.push(Script(text="Hi", chunk_fields={"text": hostile}))

    _, reply = collect(fake_openai)

    payload = reply.provider_payload("stop")
    assert reply.text == "Hi"
    assert payload["fine"] == {"a": [1, 2.5, True, None, "ok"]}
    assert payload["nul\ufffd"] == "a\ufffdb\ufffd"
    for dropped in ("huge", "huge_list", "deep", "not_a_number", "too_big", "n" * 200):
        assert dropped not in payload
    assert len(payload) <= FIELDS_MAX + 1  # the finish reason is ours
    stored = json.dumps(payload, allow_nan=False)  # storable as jsonb: no NaN
    assert len(stored) <= TOTAL_MAX_BYTES + 100


def test_fields_together_stay_within_the_total(fake_openai: FakeOpenAI):
    # Each field alone fits; all of them together would not.
    big = {f"field_{i}": "y" * (VALUE_MAX_BYTES - 100) for i in range(12)}
    fake_openai.push(Script(text="Hi", chunk_fields={"*": big}))

    _, reply = collect(fake_openai)

    payload = reply.provider_payload("stop")
    kept = [name for name in big if name in payload]
    assert 0 < len(kept) < len(big)
    assert kept == list(big)[: len(kept)]  # the first ones the server sent
    assert len(json.dumps(payload)) <= TOTAL_MAX_BYTES + 100
