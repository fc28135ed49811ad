"""The request the provider sends is the one the SDK's typed path sent (issue 19).

The provider posts a plain dict through the SDK's generic `post` instead of calling
`chat.completions.create`, whose `maybe_transform` over the typed params cost more CPU than
the rest of a turn. These tests send the same inputs both ways to the fake upstream and
compare what it received: the JSON body (values and key order), the raw bytes and the
headers; and check that the generic path keeps the SDK's retries and error classes.
"""

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import httpx2
import openai
import pytest
from openai._utils import maybe_transform
from openai.types.chat.completion_create_params import CompletionCreateParamsStreaming

from conversations.context import HistoryMessage, build_model_input
from conversations.engine.llm import openai_provider
from conversations.engine.llm.base import GenerationSettings
from conversations.engine.llm.openai_provider import OpenAIProvider
from conversations.tools.registry import tool_default_names, tool_definitions
from tests.support.fake_openai import FakeOpenAI, RecordedRequest, Script
from tests.support.streams import drain

MODEL = "gpt-test"
DRAFT = "Dear Bob,\nthe numbers are in — «naïve» café 東京 🚀"


def _history() -> list[HistoryMessage]:
    """A stored conversation with parallel tool calls, a failed call, a call that never got
    its result, a draft-edit notice between a call and its result, and non-ASCII text."""
    calc = {"id": "call_a", "name": "calculator", "arguments": '{"expression": "12*7"}'}
    clock = {"id": "call_b", "name": "current_time", "arguments": "{}"}
    lost = {"id": "call_c", "name": "calculator", "arguments": '{"expression": "1/0"}'}
    draft = {"id": "call_d", "name": "update_draft", "arguments": json.dumps({"text": DRAFT})}
    return [
        HistoryMessage("user", "What is 12*7, and what time is it?"),
        HistoryMessage("assistant", "", [calc, clock]),
        HistoryMessage("tool", "84", tool_call_id="call_a"),
        HistoryMessage("system", "[the user edited the draft]"),
        HistoryMessage("tool", '{"error": "clock unavailable"}', tool_call_id="call_b"),
        HistoryMessage("assistant", "12*7 = 84; the clock failed. 🙂"),
        HistoryMessage("user", "Divide by zero, then update the draft."),
        HistoryMessage("assistant", "Trying both.", [lost, draft]),
        HistoryMessage("tool", "saved", tool_call_id="call_d"),
        HistoryMessage("user", 'Quote: "\\u0000" and </script> \t tabs'),
    ]


def _messages() -> list[dict[str, Any]]:
    return build_model_input(
        system_prompt="You are terse.", history=_history(), draft=DRAFT, token_budget=100_000
    )


def _typed_params(
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]],
    generation: GenerationSettings,
    *,
    legacy: bool,
) -> dict[str, Any]:
    """The arguments the provider gave `chat.completions.create` before issue 19."""
    limit, temperature = generation.max_output_tokens, generation.temperature
    # What a response of the OpenAI-compatible API may add. The tool settings go only with
    # tools, as the provider sends them (servers refuse them for a request without tools).
    top_p, choice, parallel = (
        generation.top_p,
        generation.tool_choice,
        generation.parallel_tool_calls,
    )
    presence, frequency, effort = (
        generation.presence_penalty,
        generation.frequency_penalty,
        generation.reasoning_effort,
    )
    return {
        "model": MODEL,
        "messages": messages,
        "tools": tools or openai.omit,
        "max_completion_tokens": openai.omit if legacy else limit,
        "max_tokens": limit if legacy else openai.omit,
        "temperature": openai.omit if temperature is None else temperature,
        "top_p": openai.omit if top_p is None else top_p,
        "presence_penalty": openai.omit if presence is None else presence,
        "frequency_penalty": openai.omit if frequency is None else frequency,
        "reasoning_effort": openai.omit if effort is None else effort,
        "tool_choice": openai.omit if choice is None or not tools else choice,
        "parallel_tool_calls": openai.omit if parallel is None or not tools else parallel,
        "stream": True,
        "stream_options": {"include_usage": True},
    }


async def _typed_send(client: openai.AsyncOpenAI, params: dict[str, Any]) -> None:
    async with client.chat.completions.with_streaming_response.create(**params) as response:
        await response.read()


def _typed_request(provider: OpenAIProvider, fake: FakeOpenAI, **params: Any) -> RecordedRequest:
    """The request the old typed path makes, sent by the provider's own SDK client."""

    async def send() -> None:
        try:
            await _typed_send(provider.client, params)
        finally:
            await provider.aclose()

    asyncio.run(send())
    return fake.requests[-1]


def _provider_requests(
    provider: OpenAIProvider,
    fake: FakeOpenAI,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]],
    generation: GenerationSettings,
) -> list[RecordedRequest]:
    stream = provider.stream(model=MODEL, messages=messages, tools=tools, generation=generation)
    drain(stream, closing=provider)
    return fake.requests


@pytest.fixture(autouse=True)
def _forget_older_servers() -> Iterator[None]:
    yield
    openai_provider._SERVERS_WANTING_MAX_TOKENS.clear()


@pytest.mark.parametrize(
    ("generation", "with_tools"),
    [
        (GenerationSettings(max_output_tokens=321), True),
        (GenerationSettings(max_output_tokens=64, temperature=0.0), False),
        (GenerationSettings(max_output_tokens=4096, temperature=0.7), True),
        # A response's sampling and tool settings (the OpenAI-compatible API).
        (
            GenerationSettings(
                max_output_tokens=256,
                temperature=0.3,
                top_p=0.9,
                tool_choice="required",
                parallel_tool_calls=False,
            ),
            True,
        ),
        (
            GenerationSettings(
                max_output_tokens=128,
                top_p=0.5,
                tool_choice={"type": "function", "function": {"name": "calculator"}},
                parallel_tool_calls=True,
            ),
            True,
        ),
        # A response's penalties and reasoning effort (the model takes the effort here).
        (
            GenerationSettings(
                max_output_tokens=512,
                presence_penalty=0.5,
                frequency_penalty=-1.25,
                reasoning_effort="high",
                tool_choice="auto",
            ),
            True,
        ),
        # Without tools the tool settings are left out, top_p still goes.
        (
            GenerationSettings(
                max_output_tokens=64, top_p=1.0, tool_choice="none", parallel_tool_calls=False
            ),
            False,
        ),
    ],
)
def test_the_body_is_the_one_the_typed_path_sent(
    fake_openai: FakeOpenAI, generation: GenerationSettings, with_tools: bool, settings: Any
) -> None:
    settings.PARLEY_REASONING_EFFORT_MODELS = ["GPT-T*"]  # matched whatever the case
    messages = _messages()
    tools = tool_definitions(tool_default_names()) if with_tools else []
    assert any("tool_calls" in message for message in messages)  # the case that matters
    provider = OpenAIProvider(api_key="sk-test", base_url=fake_openai.base_url, max_retries=0)

    (new,) = _provider_requests(provider, fake_openai, messages, tools, generation)
    params = _typed_params(messages, tools, generation, legacy=False)
    old = _typed_request(provider, fake_openai, **params)

    assert new.body == old.body
    assert json.dumps(new.body) == json.dumps(old.body)  # the same key order too
    assert new.body == maybe_transform(params, CompletionCreateParamsStreaming)
    assert new.body["messages"] == messages
    assert ("tools" in new.body) is with_tools
    assert ("temperature" in new.body) is (generation.temperature is not None)
    assert new.body.get("top_p") == generation.top_p
    assert new.body.get("presence_penalty") == generation.presence_penalty
    assert new.body.get("frequency_penalty") == generation.frequency_penalty
    assert new.body.get("reasoning_effort") == generation.reasoning_effort
    if with_tools:
        assert new.body.get("tool_choice") == generation.tool_choice
        assert new.body.get("parallel_tool_calls") == generation.parallel_tool_calls
    else:
        assert "tool_choice" not in new.body
        assert "parallel_tool_calls" not in new.body
    assert new.headers == old.headers  # auth, user agent, X-Stainless-*, content length
    assert new.headers["authorization"] == "Bearer sk-test"


@pytest.mark.parametrize(
    ("patterns", "sent"),
    [([], False), (["o3*", "gpt-5*"], False), (["o3*", "gpt-*"], True), (["*"], True)],
)
def test_the_reasoning_effort_goes_only_to_the_models_that_take_it(
    fake_openai: FakeOpenAI, settings: Any, patterns: list[str], sent: bool
) -> None:
    settings.PARLEY_REASONING_EFFORT_MODELS = patterns
    provider = OpenAIProvider(api_key="sk-test", base_url=fake_openai.base_url, max_retries=0)
    generation = GenerationSettings(max_output_tokens=64, reasoning_effort="low")

    (request,) = _provider_requests(provider, fake_openai, _messages(), [], generation)

    assert request.body.get("reasoning_effort") == ("low" if sent else None)


def test_the_legacy_limit_body_is_the_one_the_typed_path_sent(fake_openai: FakeOpenAI) -> None:
    fake_openai.refuse_parameter("max_completion_tokens")
    messages, tools = _messages(), tool_definitions(tool_default_names())
    generation = GenerationSettings(max_output_tokens=200, temperature=1.0)
    provider = OpenAIProvider(api_key="sk-test", base_url=fake_openai.base_url, max_retries=0)

    refused, retried = _provider_requests(provider, fake_openai, messages, tools, generation)
    with pytest.raises(openai.BadRequestError):  # the old path was refused the same way
        _typed_request(
            provider, fake_openai, **_typed_params(messages, tools, generation, legacy=False)
        )
    old_refused = fake_openai.requests[-1]
    old_legacy = _typed_request(
        provider, fake_openai, **_typed_params(messages, tools, generation, legacy=True)
    )

    assert refused.refused == "max_completion_tokens"
    assert json.dumps(refused.body) == json.dumps(old_refused.body)
    assert json.dumps(retried.body) == json.dumps(old_legacy.body)
    assert retried.body["max_tokens"] == 200
    assert "max_completion_tokens" not in retried.body


def test_the_bytes_on_the_wire_are_the_typed_paths() -> None:
    """Byte for byte, through a transport that keeps each request."""
    sent: list[httpx2.Request] = []
    done = b'data: {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}\n\n'

    def handler(request: httpx2.Request) -> httpx2.Response:
        sent.append(request)
        headers = {"content-type": "text/event-stream"}
        return httpx2.Response(200, headers=headers, content=done + b"data: [DONE]\n\n")

    provider = OpenAIProvider(
        api_key="sk-test",
        base_url="http://upstream.test/v1",
        max_retries=0,
        http_client=httpx2.AsyncClient(transport=httpx2.MockTransport(handler)),
    )
    messages, tools = _messages(), tool_definitions(tool_default_names())
    generation = GenerationSettings(max_output_tokens=512, temperature=0.2)
    params = _typed_params(messages, tools, generation, legacy=False)

    async def both() -> None:
        try:
            stream = provider.stream(
                model=MODEL, messages=messages, tools=tools, generation=generation
            )
            _ = [event async for event in stream]
            await _typed_send(provider.client, params)
        finally:
            await provider.aclose()

    asyncio.run(both())

    new, old = sent
    assert new.content == old.content
    assert (new.method, new.url) == (old.method, old.url)
    assert dict(new.headers) == dict(old.headers)


async def _post_once(client: openai.AsyncOpenAI) -> None:
    body = {"model": MODEL, "stream": True, "messages": [{"role": "user", "content": "Hi"}]}
    async with openai_provider._streamed_chat_completion(client, body) as response:
        await response.read()


def test_the_generic_path_keeps_the_sdks_retries_and_errors(fake_openai: FakeOpenAI) -> None:
    fake_openai.push(Script.http(500, retry_after=0), Script(text="Fine."))
    fake_openai.push(Script.http(429, retry_after=7))

    async def calls() -> openai.APIStatusError:
        # The SDK's own retry (max_retries=1, Retry-After: 0) answers the 500; the 429
        # is then raised as the SDK's error class, its body and headers kept.
        retrying = openai.AsyncOpenAI(api_key="sk-test", base_url=fake_openai.base_url)
        once = retrying.with_options(max_retries=0)
        try:
            await _post_once(retrying.with_options(max_retries=1))
            with pytest.raises(openai.RateLimitError) as caught:
                await _post_once(once)
            return caught.value
        finally:
            await retrying.close()

    error = asyncio.run(calls())

    assert len(fake_openai.requests) == 3
    assert [r.headers["x-stainless-retry-count"] for r in fake_openai.requests] == ["0", "1", "0"]
    assert error.status_code == 429
    assert error.response.headers["retry-after"] == "7"
    assert isinstance(error.body, dict)
    assert error.body["code"] == "rate_limit_exceeded"
