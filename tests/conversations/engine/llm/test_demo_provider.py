"""DemoProvider: the offline model, and provider selection."""

import json
import socket
import time
from typing import Any

import pytest

from conversations.engine.llm import provider_get, provider_is_demo
from conversations.engine.llm.base import (
    Finished,
    StreamAccumulator,
    StreamEvent,
    TextDelta,
    ToolCallArgumentsDelta,
    ToolCallStarted,
    UsageReported,
)
from conversations.engine.llm.demo import DemoProvider
from tests.support.streams import drain


def function_tool(name: str, **properties: str) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": name,
            "parameters": {
                "type": "object",
                "properties": {key: {"type": kind} for key, kind in properties.items()},
            },
        },
    }


TOOLS = [
    function_tool("calculator", expression="string"),
    function_tool("current_time", timezone="string"),
    function_tool("update_draft", draft="string"),
]
DRAFT_CONTEXT = {"role": "system", "content": '[current draft: "Hi"]'}


def run(
    messages: list[dict[str, Any]], tools: list[dict[str, Any]] = TOOLS
) -> tuple[list[StreamEvent], StreamAccumulator]:
    events = drain(
        DemoProvider(tokens_per_second=0).stream(model="demo", messages=messages, tools=tools)
    )
    accumulator = StreamAccumulator()
    for event in events:
        accumulator.add(event)
    return events, accumulator


def user(text: str) -> list[dict[str, Any]]:
    return [
        {"role": "system", "content": "Be nice."},
        {"role": "user", "content": text},
        DRAFT_CONTEXT,
    ]


def after_tool(name: str, arguments: str, output: str) -> list[dict[str, Any]]:
    call = {"id": "call_1", "type": "function", "function": {"name": name, "arguments": arguments}}
    return [
        {"role": "user", "content": "please"},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1", "content": output},
        DRAFT_CONTEXT,
    ]


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("the demo provider must not use the network")

    monkeypatch.setattr(socket.socket, "connect", refuse)


@pytest.mark.usefixtures("offline")
def test_calculator_call_for_an_arithmetic_question() -> None:
    events, message = run(user("what is 12*7"))

    assert [e for e in events if isinstance(e, ToolCallStarted)] == [
        ToolCallStarted(index=0, call_id=message.tool_calls[0]["id"], name="calculator")
    ]
    assert len([e for e in events if isinstance(e, ToolCallArgumentsDelta)]) >= 2
    assert json.loads(message.tool_calls[0]["arguments"]) == {"expression": "12*7"}
    assert isinstance(events[-2], UsageReported)
    assert events[-1] == Finished("tool_calls")


@pytest.mark.usefixtures("offline")
def test_same_input_gives_the_same_output() -> None:
    for messages in (user("what is 12*7"), user("Tell me about otters")):
        assert run(messages)[0] == run(messages)[0]
    assert run(user("what is 1+1"))[1].tool_calls != run(user("what is 1+2"))[1].tool_calls


@pytest.mark.parametrize(
    ("text", "name", "arguments"),
    [
        ("Calculate 3 * (4 + 5) please", "calculator", {"expression": "3 * (4 + 5)"}),
        ("what is 2 plus 2?", "calculator", {"expression": "2+2"}),
        ("What time is it?", "current_time", {}),
        ("What's the date in Europe/Paris?", "current_time", {"timezone": "Europe/Paris"}),
        (
            "Update the draft to: Dear Bob, see you at 5.",
            "update_draft",
            {"draft": "Dear Bob, see you at 5."},
        ),
        ('draft: "Shopping list"', "update_draft", {"draft": "Shopping list"}),
    ],
)
def test_requests_become_tool_calls(text: str, name: str, arguments: dict[str, str]) -> None:
    _, message = run(user(text))

    assert [(c["name"], json.loads(c["arguments"])) for c in message.tool_calls] == [
        (name, arguments)
    ]
    assert message.finish_reason == "tool_calls"


def test_tools_that_are_not_offered_are_not_called() -> None:
    _, message = run(user("what is 12*7"), tools=[])

    assert message.tool_calls == []
    assert "12*7" in message.text


@pytest.mark.parametrize(
    ("name", "arguments", "output", "expected"),
    [
        ("calculator", '{"expression": "12*7"}', "84", "The result is 84."),
        ("calculator", '{"expression": "1/0"}', "division by zero", "could not work that out"),
        ("current_time", "{}", "2025-03-04T05:06:07+00:00", "05:06 on Tuesday, 04 March 2025"),
        ("update_draft", '{"draft": "x"}', "Draft updated (1 characters).", "updated the draft"),
    ],
)
def test_answer_after_a_tool_result(name: str, arguments: str, output: str, expected: str) -> None:
    _, message = run(after_tool(name, arguments, output))

    assert expected in message.text
    assert message.tool_calls == []
    assert message.finish_reason == "stop"


@pytest.mark.usefixtures("offline")
def test_a_plain_reply_says_it_is_the_demo_and_how_to_configure() -> None:
    events, message = run(user("Tell me about otters"))

    assert "demo model" in message.text
    assert "OPENAI_API_KEY" in message.text
    assert "Tell me about otters" in message.text
    assert len([e for e in events if isinstance(e, TextDelta)]) > 20  # token by token
    assert message.usage is not None
    assert message.usage["completion_tokens"] > 0
    assert message.finish_reason == "stop"


def test_streams_at_the_configured_pace() -> None:
    provider = DemoProvider(tokens_per_second=100)
    messages = after_tool("calculator", "{}", "84")

    begun = time.perf_counter()
    deltas = [
        e
        for e in drain(provider.stream(model="demo", messages=messages, tools=TOOLS))
        if isinstance(e, TextDelta)
    ]

    assert time.perf_counter() - begun >= 0.9 * len(deltas) / 100


def test_provider_selection_follows_the_api_key(settings: Any) -> None:
    settings.OPENAI_API_KEY = ""
    assert provider_is_demo()
    assert isinstance(provider_get(), DemoProvider)

    settings.OPENAI_API_KEY = "sk-test"
    settings.OPENAI_BASE_URL = "http://127.0.0.1:9/v1"
    assert not provider_is_demo()
    provider = provider_get()
    assert provider.name == "openai"
    assert provider_get() is provider  # the HTTP client and its connections are reused
