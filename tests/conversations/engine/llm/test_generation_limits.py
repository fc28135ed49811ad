"""Generation settings reach the model server: the real SDK against the fake upstream.

Every call carries a token limit (the conversation's, else the server's default), as
`max_completion_tokens`, or as `max_tokens` for an older server that refuses the new name;
a temperature goes out only when one was chosen. The demo model keeps the limit too.
"""

import logging
from collections.abc import Iterator
from typing import Any

import pytest

from conversations.engine.llm import openai_provider
from conversations.engine.llm.base import (
    Finished,
    GenerationSettings,
    ProviderError,
    StreamAccumulator,
    StreamEvent,
    TextDelta,
    UsageReported,
)
from conversations.engine.llm.demo import DemoProvider
from conversations.engine.llm.openai_provider import OpenAIProvider
from tests.support.fake_openai import FakeOpenAI, Script
from tests.support.streams import drain

MESSAGES: list[dict[str, Any]] = [{"role": "user", "content": "Tell me everything."}]


@pytest.fixture(autouse=True)
def _forget_older_servers() -> Iterator[None]:
    # The process remembers older servers by address: a later fake on a reused port must
    # not inherit this test's.
    yield
    openai_provider._SERVERS_WANTING_MAX_TOKENS.clear()


def provider_for(fake: FakeOpenAI, **options: Any) -> OpenAIProvider:
    options = {"timeout": 5.0, "max_retries": 0, "backoff_base": 0.01, **options}
    return OpenAIProvider(api_key="sk-test", base_url=fake.base_url, **options)


def call(
    provider: Any, generation: GenerationSettings | None = None
) -> tuple[list[StreamEvent], StreamAccumulator]:
    stream = provider.stream(model="gpt-test", messages=MESSAGES, tools=[], generation=generation)
    events = drain(stream, closing=provider if isinstance(provider, OpenAIProvider) else None)
    reply = StreamAccumulator()
    for event in events:
        reply.add(event)
    return events, reply


# --- what the request carries ------------------------------------------------------------


def test_the_token_limit_is_sent_as_max_completion_tokens(fake_openai: FakeOpenAI) -> None:
    call(provider_for(fake_openai), GenerationSettings(max_output_tokens=321))

    (request,) = fake_openai.requests
    assert request.body["max_completion_tokens"] == 321
    assert "max_tokens" not in request.body
    # No temperature chosen: the model's own default applies, so none is sent.
    assert "temperature" not in request.body


def test_a_call_without_settings_gets_the_server_defaults(
    fake_openai: FakeOpenAI, settings: Any
) -> None:
    settings.PARLEY_DEFAULT_MAX_OUTPUT_TOKENS = 777
    settings.PARLEY_DEFAULT_TEMPERATURE = 0.3

    call(provider_for(fake_openai))

    (request,) = fake_openai.requests
    assert request.body["max_completion_tokens"] == 777
    assert request.body["temperature"] == 0.3


@pytest.mark.parametrize("temperature", [0.0, 1.25, 2.0])
def test_a_chosen_temperature_is_sent_even_zero(fake_openai: FakeOpenAI, temperature) -> None:
    call(provider_for(fake_openai), GenerationSettings(100, temperature=temperature))

    assert fake_openai.requests[0].body["temperature"] == temperature


def test_effective_settings_prefer_the_conversations_own_and_keep_to_the_cap(
    settings: Any,
) -> None:
    settings.PARLEY_DEFAULT_MAX_OUTPUT_TOKENS = 4096
    settings.PARLEY_MAX_OUTPUT_TOKENS = 8000
    settings.PARLEY_DEFAULT_TEMPERATURE = None

    assert GenerationSettings.effective() == GenerationSettings(4096, None)
    assert GenerationSettings.effective(
        temperature=0.0, max_output_tokens=50
    ) == GenerationSettings(50, 0.0)
    # Saved before the operator lowered the cap: the cap wins.
    assert GenerationSettings.effective(max_output_tokens=20_000).max_output_tokens == 8000
    settings.PARLEY_DEFAULT_TEMPERATURE = 0.7
    assert GenerationSettings.effective().temperature == 0.7


# --- older servers that only know max_tokens ------------------------------------------------

OLD_SERVER_MESSAGES = [
    "Unrecognized request argument supplied: max_completion_tokens",
    "unknown field `max_completion_tokens`, expected one of `model`, `messages`, `max_tokens`",
    "1 validation error for ChatCompletionRequest\nmax_completion_tokens\n"
    "  Extra inputs are not permitted [type=extra_forbidden]",
]


@pytest.mark.parametrize("message", OLD_SERVER_MESSAGES)
def test_an_older_server_gets_max_tokens_after_one_refusal_and_from_then_on(
    fake_openai: FakeOpenAI, message: str, caplog: pytest.LogCaptureFixture
) -> None:
    fake_openai.refuse_parameter("max_completion_tokens", message)
    fake_openai.push(Script(text="First answer"), Script(text="Second answer"))

    # No retries allowed: the fallback is not a retry of a failure.
    with caplog.at_level(logging.WARNING):
        _, first = call(provider_for(fake_openai), GenerationSettings(max_output_tokens=64))
    _, second = call(provider_for(fake_openai), GenerationSettings(max_output_tokens=32))

    assert (first.text, second.text) == ("First answer", "Second answer")
    refused, retried, later = fake_openai.requests
    assert refused.refused == "max_completion_tokens"
    assert refused.body["max_completion_tokens"] == 64
    assert "max_completion_tokens" not in retried.body
    assert retried.body["max_tokens"] == 64
    # The next call (another provider, same server) does not pay the refused request again.
    assert later.refused is None
    assert later.body["max_tokens"] == 32
    assert "max_completion_tokens" not in later.body
    assert "sending max_tokens instead" in caplog.text


def test_a_refusal_of_the_limits_value_is_an_error_not_a_fallback(
    fake_openai: FakeOpenAI,
) -> None:
    message = "max_completion_tokens is too large: 99999. This model supports at most 16384."
    fake_openai.push(Script.http(400, message=message))

    with pytest.raises(ProviderError) as caught:
        call(provider_for(fake_openai), GenerationSettings(max_output_tokens=99_999))

    assert caught.value.code == "bad_request"
    assert "too large" in caught.value.message
    (request,) = fake_openai.requests
    assert request.body["max_completion_tokens"] == 99_999
    # The server is still asked with the current name next time.
    call(provider_for(fake_openai), GenerationSettings(max_output_tokens=100))
    assert fake_openai.requests[-1].body["max_completion_tokens"] == 100


# --- a reply cut at the limit --------------------------------------------------------------


def test_a_reply_cut_at_the_limit_finishes_with_length(fake_openai: FakeOpenAI) -> None:
    fake_openai.push(Script(text=["One ", "two ", "three ", "four ", "five "]))

    events, reply = call(provider_for(fake_openai), GenerationSettings(max_output_tokens=3))

    assert reply.text == "One two three "
    assert reply.finish_reason == "length"
    assert isinstance(events[-1], Finished)
    assert reply.usage is not None
    assert reply.usage["completion_tokens"] == 3


def test_a_length_script_without_a_limit_reached_still_reports_length(
    fake_openai: FakeOpenAI,
) -> None:
    # Some servers cut at their own context window: `length` with fewer tokens than asked.
    fake_openai.push(Script(text="Half a sen", finish_reason="length"))

    _, reply = call(provider_for(fake_openai), GenerationSettings(max_output_tokens=1000))

    assert (reply.text, reply.finish_reason) == ("Half a sen", "length")


# --- the offline demo model ------------------------------------------------------------------


def test_the_demo_model_stops_at_its_token_limit() -> None:
    demo = DemoProvider(tokens_per_second=0)

    events, reply = call(demo, GenerationSettings(max_output_tokens=4))
    _, whole = call(demo, GenerationSettings(max_output_tokens=10_000))

    assert len([event for event in events if isinstance(event, TextDelta)]) == 4
    assert reply.finish_reason == "length"
    assert whole.finish_reason == "stop"
    assert whole.text.startswith(reply.text)
    assert len(reply.text) < len(whole.text)
    usage = next(event for event in events if isinstance(event, UsageReported))
    assert usage.completion_tokens == 4


def test_the_demo_model_keeps_the_server_default_limit(settings: Any) -> None:
    settings.PARLEY_DEFAULT_MAX_OUTPUT_TOKENS = 2

    _, reply = call(DemoProvider(tokens_per_second=0))

    assert reply.finish_reason == "length"
    assert len(reply.text.split()) <= 2
