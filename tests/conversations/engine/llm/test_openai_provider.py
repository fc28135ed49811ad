"""OpenAIProvider: the real SDK against the fake OpenAI-compatible server."""

import asyncio
import itertools
import json
import re
import socket
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx2
import pytest
from openai.types.chat import ChatCompletionChunk

from conversations.engine.llm.base import (
    Finished,
    ProviderError,
    StreamAccumulator,
    StreamEvent,
    TextDelta,
    ToolCallArgumentsDelta,
    ToolCallStarted,
    UsageReported,
)
from conversations.engine.llm.openai_provider import OpenAIProvider
from conversations.engine.llm.openai_sse import ChunkTranslator, sse_events
from tests.support.fake_openai import FakeOpenAI, Script
from tests.support.streams import drain

CALL = {"id": "call_1", "type": "function", "function": {"name": "calculator", "arguments": "{}"}}
MESSAGES: list[dict[str, Any]] = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "What is 12*7?"},
    {"role": "assistant", "content": "", "tool_calls": [CALL]},
    {"role": "tool", "tool_call_id": "call_1", "content": "84"},
    {"role": "system", "content": '[current draft: "Dear Bob"]'},
]
CALCULATOR_PARAMETERS = {"type": "object", "properties": {"expression": {"type": "string"}}}
TOOLS: list[dict[str, Any]] = [
    {"type": "function", "function": {"name": "calculator", "parameters": CALCULATOR_PARAMETERS}}
]


def provider_for(fake: FakeOpenAI, **options: Any) -> OpenAIProvider:
    options = {"timeout": 5.0, "max_retries": 2, "backoff_base": 0.01, **options}
    return OpenAIProvider(api_key="sk-test-secret", base_url=fake.base_url, **options)


def run(
    provider: OpenAIProvider, tools: list[dict[str, Any]] | None = None
) -> tuple[list[StreamEvent], StreamAccumulator]:
    stream = provider.stream(model="gpt-test", messages=MESSAGES, tools=tools or [])
    events = drain(stream, closing=provider)
    accumulator = StreamAccumulator()
    for event in events:
        accumulator.add(event)
    return events, accumulator


def failure(provider: OpenAIProvider) -> ProviderError:
    with pytest.raises(ProviderError) as caught:
        run(provider)
    return caught.value


def started(events: list[StreamEvent]) -> list[ToolCallStarted]:
    return [event for event in events if isinstance(event, ToolCallStarted)]


# --- streaming -----------------------------------------------------------------------------


def test_text_stream_is_the_concatenation_of_the_tokens(fake_openai: FakeOpenAI) -> None:
    tokens = ["Hel", "lo", ", wor", "ld", "!"]
    fake_openai.push(Script(text=tokens))

    events, message = run(provider_for(fake_openai))

    assert [e.text for e in events if isinstance(e, TextDelta)] == tokens
    assert message.text == "Hello, world!"
    assert message.tool_calls == []
    assert message.finish_reason == "stop"


def test_the_request_carries_the_exact_messages_and_tools(fake_openai: FakeOpenAI) -> None:
    run(provider_for(fake_openai), tools=TOOLS)
    run(provider_for(fake_openai))

    with_tools, without_tools = fake_openai.requests
    assert with_tools.body["messages"] == MESSAGES
    assert with_tools.body["tools"] == TOOLS
    assert with_tools.body["model"] == "gpt-test"
    assert with_tools.body["stream"] is True
    assert with_tools.body["stream_options"] == {"include_usage": True}
    assert with_tools.headers["authorization"] == "Bearer sk-test-secret"
    assert "tools" not in without_tools.body


def test_a_tool_call_with_arguments_split_across_chunks(fake_openai: FakeOpenAI) -> None:
    arguments = '{"expression": "(12 + 30) * 2"}'
    fake_openai.push(Script(tool_calls=[("call_abc", "calculator", arguments)], argument_pieces=4))

    events, message = run(provider_for(fake_openai), tools=TOOLS)

    assert started(events) == [ToolCallStarted(index=0, call_id="call_abc", name="calculator")]
    pieces = [e.delta for e in events if isinstance(e, ToolCallArgumentsDelta)]
    assert len(pieces) == 4
    assert "".join(pieces) == arguments
    assert message.tool_calls == [{"id": "call_abc", "name": "calculator", "arguments": arguments}]
    assert message.finish_reason == "tool_calls"


@pytest.mark.parametrize("interleave", [False, True])
def test_two_parallel_calls(fake_openai: FakeOpenAI, interleave: bool) -> None:
    calls = [("call_a", "calculator", '{"expression": "1+1"}'), ("call_b", "current_time", "{}")]
    fake_openai.push(Script(text="Let me check.", tool_calls=calls, interleave_calls=interleave))

    events, message = run(provider_for(fake_openai))

    assert [(e.index, e.call_id, e.name) for e in started(events)] == [
        (0, "call_a", "calculator"),
        (1, "call_b", "current_time"),
    ]
    assert message.text == "Let me check."
    assert message.tool_calls == [{"id": i, "name": n, "arguments": a} for i, n, a in calls]


def test_a_new_id_at_a_used_index_starts_a_new_call(fake_openai: FakeOpenAI) -> None:
    calls = [
        ("call_a", "calculator", '{"expression": "2*3"}'),
        ("call_b", "calculator", '{"x": 1}'),
    ]
    fake_openai.push(Script(tool_calls=calls, reuse_index=True))

    events, message = run(provider_for(fake_openai))

    assert [(e.index, e.call_id) for e in started(events)] == [(0, "call_a"), (1, "call_b")]
    assert message.tool_calls == [{"id": i, "name": n, "arguments": a} for i, n, a in calls]


def test_missing_call_ids_are_generated(fake_openai: FakeOpenAI) -> None:
    calls = [(None, "calculator", '{"expression": "1"}'), (None, "current_time", "{}")]
    fake_openai.push(Script(tool_calls=calls))

    _, message = run(provider_for(fake_openai))

    ids = [call["id"] for call in message.tool_calls]
    assert all(re.fullmatch(r"call_[0-9a-f]{32}", call_id) for call_id in ids)
    assert len(set(ids)) == 2
    assert [call["arguments"] for call in message.tool_calls] == ['{"expression": "1"}', "{}"]


def test_usage_is_reported_with_its_details_before_finished(fake_openai: FakeOpenAI) -> None:
    usage = {
        "prompt_tokens": 120,
        "completion_tokens": 7,
        "total_tokens": 127,
        "prompt_tokens_details": {"cached_tokens": 64},
    }
    fake_openai.push(Script(text="Hi there", usage=usage))

    events, message = run(provider_for(fake_openai))

    assert events[-2:] == [
        UsageReported(120, 7, 127, {"prompt_tokens_details": {"cached_tokens": 64}}),
        Finished("stop"),
    ]
    assert message.usage == usage
    assert sum(isinstance(e, Finished) for e in events) == 1


def test_without_a_usage_chunk_the_stream_still_finishes(fake_openai: FakeOpenAI) -> None:
    fake_openai.push(Script(text="Hi", include_usage=False))

    events, message = run(provider_for(fake_openai))

    assert not any(isinstance(e, UsageReported) for e in events)
    assert events[-1] == Finished("stop")
    assert message.usage is None


def test_argument_pieces_before_the_name_are_held_back() -> None:
    def chunk(tool_call: dict[str, Any], finish_reason: str | None = None) -> ChatCompletionChunk:
        delta = {"tool_calls": [tool_call]} if tool_call else {}
        return ChatCompletionChunk.model_validate(
            {
                "id": "c",
                "object": "chat.completion.chunk",
                "created": 0,
                "model": "m",
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
            }
        )

    translator = ChunkTranslator()
    events: list[StreamEvent] = []
    for piece in (
        chunk({"index": 0, "id": "call_x", "function": {"arguments": '{"a"'}}),
        chunk({"index": 0, "function": {"name": "calculator", "arguments": ": 1"}}),
        chunk({"index": 0, "function": {"arguments": "}"}}),
        chunk({}, finish_reason="tool_calls"),
    ):
        events += translator.feed(piece)
    events += translator.finish()

    assert events == [
        ToolCallStarted(index=0, call_id="call_x", name="calculator"),
        ToolCallArgumentsDelta("call_x", '{"a": 1'),
        ToolCallArgumentsDelta("call_x", "}"),
        Finished("tool_calls"),
    ]


async def text_of(provider: OpenAIProvider) -> str:
    reply = StreamAccumulator()
    async for event in provider.stream(model="m", messages=MESSAGES, tools=[]):
        reply.add(event)
    return reply.text


async def test_concurrent_streams_on_one_loop_do_not_mix(fake_openai: FakeOpenAI) -> None:
    fake_openai.default_script = Script(text="one two three four five", tokens_per_second=200)
    provider = provider_for(fake_openai)

    texts = await asyncio.gather(*(text_of(provider) for _ in range(20)))
    await provider.aclose()

    assert texts == ["one two three four five"] * 20
    assert len(fake_openai.requests) == 20


# --- retries and errors ----------------------------------------------------------------------


def test_rate_limit_then_success_is_retried(fake_openai: FakeOpenAI) -> None:
    fake_openai.push(Script.http(429), Script(text="Recovered"))

    _, message = run(provider_for(fake_openai))

    assert message.text == "Recovered"
    assert len(fake_openai.requests) == 2


def test_retry_after_is_honoured_but_capped(fake_openai: FakeOpenAI) -> None:
    fake_openai.push(Script.http(429, retry_after=0.3), Script.http(503, retry_after=600))
    provider = provider_for(fake_openai, retry_after_max=0.2)

    begun = time.perf_counter()
    _, message = run(provider)
    elapsed = time.perf_counter() - begun

    assert message.text == "OK"
    assert 0.2 + 0.2 <= elapsed < 2  # 0.2 (capped 0.3) + 0.2 (capped 600)


def test_server_errors_fail_after_the_last_retry(fake_openai: FakeOpenAI) -> None:
    fake_openai.push(*[Script.http(500)] * 3, Script(text="never reached"))

    error = failure(provider_for(fake_openai, max_retries=2))

    assert error.code == "provider_error"
    assert "HTTP 500" in error.message
    assert len(fake_openai.requests) == 3


@pytest.mark.parametrize(
    "script",
    [
        Script.http(400, code="context_length_exceeded"),
        # vLLM and others: no code, only the message says so.
        Script.http(400, message="This model's maximum context length is 4096 tokens."),
    ],
)
def test_context_length_exceeded_is_not_retried(fake_openai: FakeOpenAI, script: Script) -> None:
    fake_openai.push(script)

    error = failure(provider_for(fake_openai))

    assert error.code == "context_length_exceeded"
    assert "too long" in error.message
    assert len(fake_openai.requests) == 1


@pytest.mark.parametrize(
    ("status", "code"),
    [
        (400, "bad_request"),
        (401, "authentication_failed"),
        (403, "authentication_failed"),
        (404, "bad_request"),
        (422, "bad_request"),
    ],
)
def test_client_errors_map_to_codes_without_retry(
    fake_openai: FakeOpenAI, status: int, code: str
) -> None:
    fake_openai.push(Script.http(status))

    error = failure(provider_for(fake_openai))

    assert error.code == code
    assert "sk-te" not in error.message  # OpenAI's 401 text quotes part of the key
    assert len(fake_openai.requests) == 1


def test_a_slow_first_token_times_out_and_is_retried(fake_openai: FakeOpenAI) -> None:
    fake_openai.default_script = Script(text="late", first_token_delay=3)

    begun = time.perf_counter()
    error = failure(provider_for(fake_openai, timeout=0.25, max_retries=1))

    assert error.code == "provider_timeout"
    assert time.perf_counter() - begun < 2
    assert len(fake_openai.requests) == 2  # timeouts before the first token are retried


def test_a_connection_cut_mid_stream_is_not_retried(fake_openai: FakeOpenAI) -> None:
    fake_openai.push(Script(text="This reply will never end", cut_after_chunks=3))
    received: list[StreamEvent] = []

    async def consume() -> None:
        provider = provider_for(fake_openai)
        try:
            async for event in provider.stream(model="m", messages=MESSAGES, tools=[]):
                received.append(event)
        finally:
            await provider.aclose()

    with pytest.raises(ProviderError) as caught:
        asyncio.run(consume())

    assert caught.value.code == "connection_error"
    assert [e.text for e in received if isinstance(e, TextDelta)] == ["This", " rep"]
    assert len(fake_openai.requests) == 1


def test_a_cut_after_the_finish_reason_keeps_the_complete_reply(fake_openai: FakeOpenAI) -> None:
    fake_openai.push(Script(text="abcd", cut_after_chunks=3))  # role, text, finish, (usage)

    events, message = run(provider_for(fake_openai))

    assert message.text == "abcd"
    assert events[-1] == Finished("stop")
    assert message.usage is None
    assert len(fake_openai.requests) == 1


def test_a_stream_without_finish_reason_is_a_connection_error(fake_openai: FakeOpenAI) -> None:
    fake_openai.push(Script(text="Half a", send_finish_reason=False))

    error = failure(provider_for(fake_openai))

    assert error.code == "connection_error"
    assert "stopped early" in error.message


def test_an_error_event_mid_stream_is_a_provider_error(fake_openai: FakeOpenAI) -> None:
    fake_openai.push(Script(text="Some text", error_event_after_chunks=2))

    error = failure(provider_for(fake_openai))

    assert error.code == "provider_error"
    assert len(fake_openai.requests) == 1


def test_a_refused_connection_is_retried_then_reported() -> None:
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    provider = OpenAIProvider(
        api_key="sk-test", base_url=f"http://127.0.0.1:{port}/v1", max_retries=1, backoff_base=0.01
    )

    with pytest.raises(ProviderError) as caught:
        drain(provider.stream(model="m", messages=MESSAGES, tools=[]), closing=provider)

    assert caught.value.code == "connection_error"
    assert "connect" in caught.value.message


async def test_closing_the_stream_early_releases_the_connection(fake_openai: FakeOpenAI) -> None:
    fake_openai.push(Script(text="a long reply " * 20, tokens_per_second=500))
    provider = provider_for(fake_openai)

    stream = provider.stream(model="m", messages=MESSAGES, tools=[])
    assert isinstance(await anext(stream), TextDelta)
    await stream.aclose()  # what a stopped run does

    assert await text_of(provider) == "OK"
    await provider.aclose()


def test_recorded_chunks_have_send_times(fake_openai: FakeOpenAI) -> None:
    seen: list[int] = []
    fake_openai.push(Script(text="abcdefgh", on_chunk=lambda index, _at: seen.append(index)))

    run(provider_for(fake_openai))

    chunks = fake_openai.requests[0].chunks
    assert [chunk.kind for chunk in chunks] == ["role", "text", "text", "finish", "usage", "done"]
    assert seen == [chunk.index for chunk in chunks]
    assert all(a.perf_counter <= b.perf_counter for a, b in itertools.pairwise(chunks))
    assert json.loads(chunks[1].data)["choices"][0]["delta"] == {"content": "abcd"}


async def test_chunks_are_not_turned_into_sdk_models(
    fake_openai: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The SDK's Stream builds a pydantic model per chunk through this hook: that CPU cost is
    # what reading the SSE body in the provider avoids.
    fake_openai.push(Script(text="No models here"))
    provider = provider_for(fake_openai)

    def no_models(**_: Any) -> None:
        raise AssertionError("a chunk was turned into an SDK model")

    monkeypatch.setattr(provider.client, "_process_response_data", no_models)

    assert await text_of(provider) == "No models here"
    await provider.aclose()


# --- the SSE wire format, byte by byte ------------------------------------------------------


def sse_provider(*reads: bytes | Exception) -> tuple[OpenAIProvider, list[httpx2.Request]]:
    """A provider whose upstream answers every request with `reads`, one read at a time (an
    exception in `reads` is raised at that point, as a transport failure would be)."""
    requests: list[httpx2.Request] = []

    async def body() -> AsyncIterator[bytes]:
        for read in reads:
            if isinstance(read, Exception):
                raise read
            yield read

    def handler(request: httpx2.Request) -> httpx2.Response:
        requests.append(request)
        return httpx2.Response(200, headers={"content-type": "text/event-stream"}, content=body())

    provider = OpenAIProvider(
        api_key="sk-test",
        base_url="http://upstream.test/v1",
        timeout=5.0,
        max_retries=2,
        backoff_base=0.01,
        http_client=httpx2.AsyncClient(transport=httpx2.MockTransport(handler)),
    )
    return provider, requests


def data(delta: dict[str, Any], finish_reason: str | None = None) -> str:
    choice = {"index": 0, "delta": delta, "finish_reason": finish_reason}
    return json.dumps({"object": "chat.completion.chunk", "choices": [choice]})


def one_read(body: bytes) -> list[bytes]:
    return [body]


def one_byte_reads(body: bytes) -> list[bytes]:  # every CRLF is split across two reads
    return [body[i : i + 1] for i in range(len(body))]


@pytest.mark.parametrize("split", [one_read, one_byte_reads])
def test_sse_comments_fields_and_line_endings_per_the_spec(
    split: Callable[[bytes], list[bytes]],
) -> None:
    usage = {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}
    body = (
        f"\ufeffdata: {data({'content': 'Hel'})}\r\n"  # a BOM may open the stream
        ": a comment, as keep-alives are sent\r\n"
        "id: 1\r\nretry: 3000\r\nevent: message\r\n\r\n"
        f"data:{data({'content': 'lo'})}\r"  # no space after the colon; CR alone ends a line
        "\r"
        ":\n"
        "event: ping\n\n"  # an event without data is never dispatched
        f"data: {data({}, 'stop')}\n\n"
        f"data: {json.dumps({'choices': [], 'usage': usage})}\n\n"
        "data: [DONE]\n\n"
        f"data: {data({'content': 'after DONE'})}\n\n"
    ).encode()
    provider, _ = sse_provider(*split(body))

    events, message = run(provider)

    assert message.text == "Hello"
    assert events[-2:] == [UsageReported(3, 2, 5), Finished("stop")]


def test_sse_data_lines_of_one_event_are_joined_with_newlines() -> None:
    chunk = json.dumps(
        {"choices": [{"index": 0, "delta": {"content": "Hi"}, "finish_reason": "stop"}]},
        indent=2,
    )
    body = "".join(f"data: {line}\n" for line in chunk.splitlines()) + "\ndata: [DONE]\n\n"
    provider, _ = sse_provider(body.encode())

    events, _ = run(provider)

    assert events == [TextDelta("Hi"), Finished("stop")]


def test_sse_parser_edge_cases() -> None:
    reads = [b"data", b"\ndata: a\r", b"\ndata:  b\n\nevent: x\n\n", b"data: lost at the end\n"]

    assert list(sse_events(reads)) == [(b"", b"\na\n b")]


def test_an_event_named_error_maps_like_an_in_stream_error() -> None:
    error = {"message": "maximum context length is 8192 tokens", "code": None}
    body = f"event: error\ndata: {json.dumps(error)}\n\n"  # no {"error": ...} wrapper
    provider, requests = sse_provider(
        f"data: {data({'role': 'assistant'})}\n\n".encode(), body.encode()
    )

    caught = failure(provider)

    assert caught.code == "context_length_exceeded"
    assert "8192" in caught.message
    assert len(requests) == 1


@pytest.mark.parametrize("payload", ["{not json", "[1, 2]"])
def test_an_unreadable_chunk_is_a_provider_error(payload: str) -> None:
    provider, requests = sse_provider(f"data: {payload}\n\n".encode())

    caught = failure(provider)

    assert caught.code == "provider_error"
    assert "could not be read" in caught.message
    assert len(requests) == 1


def test_a_stall_mid_stream_is_a_timeout_and_not_retried() -> None:
    provider, requests = sse_provider(
        f"data: {data({'content': 'Hi'})}\n\n".encode(), httpx2.ReadTimeout("stalled")
    )
    received: list[StreamEvent] = []

    async def consume() -> None:
        try:
            async for event in provider.stream(model="m", messages=MESSAGES, tools=[]):
                received.append(event)
        finally:
            await provider.aclose()

    with pytest.raises(ProviderError) as caught:
        asyncio.run(consume())

    assert caught.value.code == "provider_timeout"
    assert received == [TextDelta("Hi")]
    assert len(requests) == 1


def test_a_transport_error_before_the_first_event_is_retried() -> None:
    provider, requests = sse_provider(b": warming up\n\n", httpx2.ReadError("reset"))

    caught = failure(provider)

    assert caught.code == "connection_error"
    assert "connect" in caught.message  # nothing reached the caller
    assert len(requests) == 3  # the first try and two retries


# --- text that cannot be stored ----------------------------------------------------------


def test_unstorable_text_from_the_provider_is_repaired_on_arrival(fake_openai: FakeOpenAI) -> None:
    # On the wire these are JSON escapes: valid JSON, but not text a database can hold.
    fake_openai.push(Script(text=["lone \ud800 here", " and NUL\x00", " pair \ud83d\ude00"]))

    events, message = run(provider_for(fake_openai))

    deltas = [e.text for e in events if isinstance(e, TextDelta)]
    assert deltas == ["lone \ufffd here", " and NUL\ufffd", " pair 😀"]
    assert message.text == "lone \ufffd here and NUL\ufffd pair 😀"
    message.text.encode("utf-8")  # storable


def test_tool_names_ids_arguments_and_usage_from_the_provider_are_repaired() -> None:
    translator = ChunkTranslator()
    events: list[StreamEvent] = []
    for piece in (
        {
            "choices": [
                {
                    "index": 0,
                    "delta": {
                        "tool_calls": [
                            {
                                "index": 0,
                                "id": "call\x00\udc00",
                                "function": {"name": "calc\ud800", "arguments": '{"a": "\udfff"}'},
                            }
                        ]
                    },
                    "finish_reason": "tool_calls\x00",
                }
            ]
        },
        {
            "choices": [],
            "usage": {
                "prompt_tokens": "12",
                "completion_tokens": -3,
                "total_tokens": 2**63,
                "prompt_tokens_details": {"cached\ud800": "x\x00"},
            },
        },
    ):
        events += translator.feed(piece)
    events += translator.finish()
    for event in events:
        for value in vars(event).values():
            assert "\x00" not in repr(value)
            str(value).encode("utf-8")
    assert events[0] == ToolCallStarted(index=0, call_id="call\ufffd\ufffd", name="calc\ufffd")
    usage = next(e for e in events if isinstance(e, UsageReported))
    assert (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens) == (0, 0, 0)
    assert usage.details == {"prompt_tokens_details": {"cached\ufffd": "x\ufffd"}}
