"""A reasoning model's thoughts (`reasoning_content` or `reasoning` in the deltas): read as
their own events, before the answer, never mixed into its text. The real SDK against the
fake upstream over HTTP."""

import asyncio
from typing import Any

import pytest

from conversations.engine.llm.base import (
    Finished,
    ReasoningDelta,
    StreamAccumulator,
    StreamEvent,
    TextDelta,
    ToolCallStarted,
    storable_event,
)
from conversations.engine.llm.openai_provider import OpenAIProvider
from conversations.engine.llm.openai_sse import ChunkTranslator
from tests.support.fake_openai import FakeOpenAI, Script
from tests.support.streams import drain

MESSAGES = [{"role": "user", "content": "What is 17*23?"}]
THOUGHTS = ["17*23: ", "17*20 is 340, ", "17*3 is 51, ", "so 391."]


def provider_for(fake: FakeOpenAI) -> OpenAIProvider:
    return OpenAIProvider(api_key="sk-test", base_url=fake.base_url, timeout=5.0, max_retries=0)


@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
def test_reasoning_streams_before_the_answer_and_stays_out_of_its_text(
    fake_openai: FakeOpenAI, field: str
):
    fake_openai.push(Script(reasoning=THOUGHTS, reasoning_field=field, text=["It is ", "391."]))
    provider = provider_for(fake_openai)

    events = drain(provider.stream(model="m", messages=MESSAGES, tools=[]), closing=provider)

    # Each thought arrived in its own chunk over the wire, and is its own event.
    sent = [chunk for chunk in fake_openai.requests[0].chunks if chunk.kind == "reasoning"]
    assert len(sent) == len(THOUGHTS)
    assert all(f'"{field}"' in chunk.data for chunk in sent)
    thoughts = [e.text for e in events if isinstance(e, ReasoningDelta)]
    assert thoughts == THOUGHTS
    first_text = next(i for i, e in enumerate(events) if isinstance(e, TextDelta))
    last_thought = max(i for i, e in enumerate(events) if isinstance(e, ReasoningDelta))
    assert last_thought < first_text
    reply = StreamAccumulator()
    for event in events:
        reply.add(event)
    assert reply.text == "It is 391."
    assert reply.reasoning == "".join(THOUGHTS)
    assert reply.finish_reason == "stop"


def test_how_long_it_thought_is_measured_to_the_first_word_of_the_answer(
    fake_openai: FakeOpenAI,
):
    # Four thoughts at 20 tokens a second: the answer starts ~0.2 s after the first one.
    fake_openai.push(Script(reasoning=THOUGHTS, text=["It is ", "391."], tokens_per_second=20))
    provider = provider_for(fake_openai)

    async def live() -> StreamAccumulator:
        reply = StreamAccumulator()  # fed as events arrive, as the streaming loop does
        try:
            async for event in provider.stream(model="m", messages=MESSAGES, tools=[]):
                reply.add(storable_event(event))
        finally:
            await provider.aclose()
        return reply

    reply = asyncio.run(live())

    assert reply.reasoning_ms is not None
    assert 120 <= reply.reasoning_ms < 2_000


def test_thinking_time_ends_at_the_first_text_or_tool_call():
    ticks = iter([1.0, 1.5, 4.25, 9.0])
    reply = StreamAccumulator(clock=lambda: next(ticks))
    reply.add(ReasoningDelta("Hmm, "))  # 1.0
    reply.add(ReasoningDelta("a tool would know. "))  # 1.5
    assert reply.reasoning_ms == 500  # so far: to the latest thought
    reply.add(ToolCallStarted(index=0, call_id="c1", name="calculator"))  # 4.25
    reply.add(ReasoningDelta("(after)"))  # thoughts after the answer began do not count
    reply.add(TextDelta("Done."))
    assert reply.reasoning_ms == 3250
    assert reply.reasoning == "Hmm, a tool would know. (after)"

    plain = StreamAccumulator(clock=lambda: pytest.fail("no thoughts, no clock"))
    plain.add(TextDelta("Just an answer."))
    assert (plain.reasoning, plain.reasoning_ms) == ("", None)


def test_a_server_sending_both_names_is_read_once_and_made_storable():
    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    translator = ChunkTranslator()
    events: list[StreamEvent] = []
    for piece in (
        chunk({"reasoning_content": "same \x00thought", "reasoning": "same \x00thought"}),
        chunk({"reasoning": "only the new name"}),
        chunk({"reasoning": None, "content": "Answer"}),
        chunk({}, "stop"),
    ):
        events += translator.feed(piece)
    events += translator.finish()

    assert events == [
        ReasoningDelta("same \ufffdthought"),
        ReasoningDelta("only the new name"),
        TextDelta("Answer"),
        Finished("stop"),
    ]
