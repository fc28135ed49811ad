"""The translator of a run's event log into OpenAI's Responses stream events, on its own:
hand-built logs, no database, no Redis, no upstream. Each case pins the exact event
sequence, checks the numbering is gapless from 0, that `starting_after=N` gives exactly
the tail past N, and that every event validates against the Open Responses schema and
(where the SDK has the type) as the SDK's own pydantic event type."""

import uuid
from datetime import UTC, datetime
from typing import Any

import pydantic
import pytest
from openai.types.responses import Response, ResponseStreamEvent

from conversations.engine import eventlog
from conversations.models import Run
from conversations.openai_api.responses_out import response_head
from conversations.openai_api.stream import openai_events, sse_frame
from tests.support import open_responses
from tests.support.sdk_types import assert_sdk_shape

RUN = uuid.UUID("00000000-0000-4000-8000-000000000001")
M1 = "11111111-1111-4111-8111-111111111111"
M2 = "22222222-2222-4222-8222-222222222222"
TOOL = "33333333-3333-4333-8333-333333333333"
USAGE = {"prompt_tokens": 12, "completion_tokens": 5, "total_tokens": 17}
EVENTS: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(ResponseStreamEvent)
# The specification's names for a reasoning item's text events; OpenAI's SDK knows them as
# `response.reasoning_text.*` and passes events it does not know through as they are.
SPEC_ONLY = {"response.reasoning.delta", "response.reasoning.done"}


def _hex(message_id: str) -> str:
    return message_id.replace("-", "")


def _head() -> dict[str, Any]:
    # An unsaved run: response_head reads only its own fields.
    run = Run(
        id=RUN,
        conversation_id=uuid.uuid4(),
        model="gpt-test",
        created_at=datetime(2025, 1, 2, tzinfo=UTC),
        options={"tools": [], "store": True},
    )
    return response_head(run)


def _log(*events: tuple[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """A run's events as the log stores them (envelope fields the translator ignores)."""
    return [
        {"type": kind, "run_id": str(RUN), "sequence_number": n, **payload}
        for n, (kind, payload) in enumerate(events)
    ]


def _start(*rest: tuple[str, dict[str, Any]]) -> list[dict[str, Any]]:
    run: dict[str, Any] = {"id": str(RUN), "status": "queued", "usage": {}, "error": None}
    return _log(
        (eventlog.RUN_CREATED, {"run": run}),
        (eventlog.RUN_IN_PROGRESS, {"run": {**run, "status": "in_progress"}}),
        *rest,
    )


def _end(status: str, error: dict[str, str] | None = None) -> tuple[str, dict[str, Any]]:
    kind = {
        "completed": eventlog.RUN_COMPLETED,
        "failed": eventlog.RUN_FAILED,
        "cancelled": eventlog.RUN_CANCELLED,
        "incomplete": eventlog.RUN_INCOMPLETE,
    }[status]
    return kind, {"run": {"id": str(RUN), "status": status, "usage": USAGE, "error": error}}


def _created(message_id: str) -> tuple[str, dict[str, Any]]:
    return eventlog.MESSAGE_CREATED, {"message_id": message_id, "role": "assistant"}


def _delta(message_id: str, text: str) -> tuple[str, dict[str, Any]]:
    return eventlog.MESSAGE_DELTA, {"message_id": message_id, "delta": text}


def _message_done(message_id: str, text: str) -> tuple[str, dict[str, Any]]:
    message = {"id": message_id, "role": "assistant", "content": text}
    return eventlog.MESSAGE_COMPLETED, {"message": message}


def _call(message_id: str, call_id: str, name: str, *parts: str) -> list[tuple[str, Any]]:
    """A tool call announced, its arguments streamed in `parts`, then completed."""
    return [
        (eventlog.TOOL_CALL_CREATED, {"message_id": message_id, "call_id": call_id, "name": name}),
        *[(eventlog.TOOL_CALL_ARGUMENTS_DELTA, {"call_id": call_id, "delta": p}) for p in parts],
        (
            eventlog.TOOL_CALL_COMPLETED,
            {"call_id": call_id, "name": name, "arguments": "".join(parts)},
        ),
    ]


def _translate(log: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = list(openai_events(_head(), log))
    assert [event["sequence_number"] for event in out] == list(range(len(out)))
    for event in out:
        open_responses.event_check(event)
        if event["type"] in SPEC_ONLY:
            continue
        assert_sdk_shape(ResponseStreamEvent, event)
        assert EVENTS.validate_python(event).type == event["type"]
    # Resuming after any point gives exactly the rest, from a fresh translation.
    for n in range(-1, len(out) + 1):
        assert list(openai_events(_head(), log, after=n)) == out[n + 1 :]
    final = out[-1]["response"]
    assert_sdk_shape(Response, final)
    open_responses.response_check(final)
    return out


def _shape(events: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """Each event as (type, output_index, the part that says what it carries)."""
    shaped = []
    for event in events:
        kind = event["type"].removeprefix("response.")
        what = event.get("delta", event.get("text", event.get("arguments")))
        if "item" in event:
            what = (event["item"]["type"], event["item"]["id"], event["item"].get("status"))
        if "response" in event:
            what = event["response"]["status"]
        shaped.append((kind, event.get("output_index"), what))
    return shaped


def test_text_reply():
    out = _translate(
        _start(
            _created(M1),
            _delta(M1, "Hel"),
            _delta(M1, "lo"),
            _message_done(M1, "Hello"),
            _end("completed"),
        )
    )
    msg = f"msg_{_hex(M1)}"
    assert _shape(out) == [
        ("created", None, "queued"),
        ("in_progress", None, "in_progress"),
        ("output_item.added", 0, ("message", msg, "in_progress")),
        ("content_part.added", 0, None),
        ("output_text.delta", 0, "Hel"),
        ("output_text.delta", 0, "lo"),
        ("output_text.done", 0, "Hello"),
        ("content_part.done", 0, None),
        ("output_item.done", 0, ("message", msg, "completed")),
        ("completed", None, "completed"),
    ]
    final = out[-1]["response"]
    assert final["id"] == f"resp_{RUN.hex}"
    assert final["output"] == [out[8]["item"]]
    assert final["output"][0]["content"][0]["text"] == "Hello"
    assert final["usage"]["input_tokens"] == 12
    assert final["usage"]["output_tokens"] == 5
    assert final["usage"]["total_tokens"] == 17


def test_a_server_tool_with_split_arguments_then_its_result_then_more_text():
    out = _translate(
        _start(
            _created(M1),
            _delta(M1, "Let me check."),
            *_call(M1, "call_1", "calculator", '{"expr', 'ession": "1+1"}'),
            _message_done(M1, "Let me check."),
            (
                eventlog.TOOL_RESULT_COMPLETED,
                {"call_id": "call_1", "output": "2", "is_error": False, "message_id": TOOL},
            ),
            _created(M2),
            _delta(M2, "Two."),
            _message_done(M2, "Two."),
            _end("completed"),
        )
    )
    msg1, fc, fco, msg2 = (
        f"msg_{_hex(M1)}",
        f"fc_{_hex(M1)}_0",
        f"fco_{_hex(TOOL)}",
        f"msg_{_hex(M2)}",
    )
    assert _shape(out) == [
        ("created", None, "queued"),
        ("in_progress", None, "in_progress"),
        ("output_item.added", 0, ("message", msg1, "in_progress")),
        ("content_part.added", 0, None),
        ("output_text.delta", 0, "Let me check."),
        ("output_item.added", 1, ("function_call", fc, "in_progress")),
        ("function_call_arguments.delta", 1, '{"expr'),
        ("function_call_arguments.delta", 1, 'ession": "1+1"}'),
        # The call's completion closes the text of its message first.
        ("output_text.done", 0, "Let me check."),
        ("content_part.done", 0, None),
        ("output_item.done", 0, ("message", msg1, "completed")),
        ("function_call_arguments.done", 1, '{"expression": "1+1"}'),
        ("output_item.done", 1, ("function_call", fc, "completed")),
        ("output_item.added", 2, ("function_call_output", fco, "completed")),
        ("output_item.done", 2, ("function_call_output", fco, "completed")),
        ("output_item.added", 3, ("message", msg2, "in_progress")),
        ("content_part.added", 3, None),
        ("output_text.delta", 3, "Two."),
        ("output_text.done", 3, "Two."),
        ("content_part.done", 3, None),
        ("output_item.done", 3, ("message", msg2, "completed")),
        ("completed", None, "completed"),
    ]
    output = out[-1]["response"]["output"]
    assert [item["id"] for item in output] == [msg1, fc, fco, msg2]
    assert output[1]["arguments"] == '{"expression": "1+1"}'
    assert output[2] | {"name": "calculator"} == output[2]  # the result names its tool
    assert output[2]["output"] == "2"


def test_client_function_calls_end_the_response_with_their_items():
    out = _translate(
        _start(
            _created(M1),
            *_call(M1, "call_a", "get_weather", '{"city"', ': "Oslo"}'),
            *_call(M1, "call_b", "get_weather", '{"city": "Rome"}'),
            _message_done(M1, ""),
            _end("completed"),
        )
    )
    fc0, fc1 = f"fc_{_hex(M1)}_0", f"fc_{_hex(M1)}_1"
    assert _shape(out) == [
        ("created", None, "queued"),
        ("in_progress", None, "in_progress"),
        ("output_item.added", 0, ("function_call", fc0, "in_progress")),
        ("function_call_arguments.delta", 0, '{"city"'),
        ("function_call_arguments.delta", 0, ': "Oslo"}'),
        ("function_call_arguments.done", 0, '{"city": "Oslo"}'),
        ("output_item.done", 0, ("function_call", fc0, "completed")),
        ("output_item.added", 1, ("function_call", fc1, "in_progress")),
        ("function_call_arguments.delta", 1, '{"city": "Rome"}'),
        ("function_call_arguments.done", 1, '{"city": "Rome"}'),
        ("output_item.done", 1, ("function_call", fc1, "completed")),
        ("completed", None, "completed"),
    ]
    output = out[-1]["response"]["output"]
    assert [(item["call_id"], item["name"]) for item in output] == [
        ("call_a", "get_weather"),
        ("call_b", "get_weather"),
    ]
    assert all(item["type"] == "function_call" for item in output)


@pytest.mark.parametrize(
    ("status", "error", "event", "details"),
    [
        ("failed", {"code": "rate_limited", "message": "Slow down."}, "failed", None),
        ("cancelled", None, "failed", None),
        ("incomplete", {"code": "max_output_tokens", "message": "Cut."}, "incomplete", True),
    ],
)
def test_a_run_ending_early_closes_what_it_started(status, error, event, details):
    out = _translate(_start(_created(M1), _delta(M1, "Half a"), _end(status, error)))
    msg = f"msg_{_hex(M1)}"
    assert _shape(out)[2:] == [
        ("output_item.added", 0, ("message", msg, "in_progress")),
        ("content_part.added", 0, None),
        ("output_text.delta", 0, "Half a"),
        ("output_text.done", 0, "Half a"),
        ("content_part.done", 0, None),
        ("output_item.done", 0, ("message", msg, "completed")),
        (event, None, status),
    ]
    final = out[-1]["response"]
    assert final["output"][0]["content"][0]["text"] == "Half a"
    if status == "failed":
        assert final["error"] == {"code": "rate_limit_exceeded", "message": "Slow down."}
    else:
        assert final["error"] is None
    expected = {"reason": "max_output_tokens"} if details else None
    assert final["incomplete_details"] == expected


def test_a_retried_step_restarts_its_message_without_sending_text_twice():
    # The worker died after "Hello, wo"; the retried step announces the same message
    # again and streams it from its start.
    out = _translate(
        _start(
            _created(M1),
            _delta(M1, "Hello, "),
            _delta(M1, "wo"),
            _created(M1),
            _delta(M1, "Hello"),
            _delta(M1, ", world"),
            _delta(M1, "!"),
            _message_done(M1, "Hello, world!"),
            _end("completed"),
        )
    )
    deltas = [e["delta"] for e in out if e["type"] == "response.output_text.delta"]
    assert deltas == ["Hello, ", "wo", "rld", "!"]
    assert [e["type"] for e in out].count("response.output_item.added") == 1
    (done,) = [e for e in out if e["type"] == "response.output_text.done"]
    assert done["text"] == "".join(deltas) == "Hello, world!"
    assert out[-1]["response"]["output"][0]["content"][0]["text"] == "Hello, world!"


def _thought(message_id: str, text: str) -> tuple[str, dict[str, Any]]:
    return eventlog.REASONING_DELTA, {"message_id": message_id, "delta": text}


def test_events_without_a_counterpart_are_left_out():
    out = _translate(
        _start(
            _created(M1),
            (eventlog.DRAFT_UPDATED, {"draft": "x"}),
            _delta(M1, "Hi"),
            _message_done(M1, "Hi"),
            _end("completed"),
        )
    )
    assert len(out) == 9
    assert "draft" not in str(out)


def test_thoughts_stream_as_a_reasoning_item_before_the_answer():
    out = _translate(
        _start(
            _created(M1),
            _thought(M1, "Think"),
            _thought(M1, "ing."),
            _delta(M1, "Hi"),
            _message_done(M1, "Hi"),
            _end("completed"),
        )
    )
    rs, msg = f"rs_{_hex(M1)}", f"msg_{_hex(M1)}"
    assert _shape(out) == [
        ("created", None, "queued"),
        ("in_progress", None, "in_progress"),
        ("output_item.added", 0, ("reasoning", rs, None)),
        ("content_part.added", 0, None),
        ("reasoning.delta", 0, "Think"),
        ("reasoning.delta", 0, "ing."),
        ("reasoning.done", 0, "Thinking."),
        ("content_part.done", 0, None),
        ("output_item.done", 0, ("reasoning", rs, None)),
        ("output_item.added", 1, ("message", msg, "in_progress")),
        ("content_part.added", 1, None),
        ("output_text.delta", 1, "Hi"),
        ("output_text.done", 1, "Hi"),
        ("content_part.done", 1, None),
        ("output_item.done", 1, ("message", msg, "completed")),
        ("completed", None, "completed"),
    ]
    reasoning, message = out[-1]["response"]["output"]
    assert reasoning == {
        "id": rs,
        "type": "reasoning",
        "summary": [],
        "content": [{"type": "reasoning_text", "text": "Thinking."}],
    }
    assert message["content"][0]["text"] == "Hi"


def test_thoughts_then_a_tool_call_close_before_the_call():
    out = _translate(
        _start(
            _created(M1),
            _thought(M1, "I need the weather."),
            *_call(M1, "call_1", "get_weather", "{}"),
            _message_done(M1, ""),
            _end("completed"),
        )
    )
    kinds = [(e["type"], e.get("item", {}).get("type")) for e in out]
    assert kinds.index(("response.reasoning.done", None)) < kinds.index(
        ("response.output_item.added", "function_call")
    )
    assert [item["type"] for item in out[-1]["response"]["output"]] == [
        "reasoning",
        "function_call",
    ]


def test_a_retried_step_does_not_send_thoughts_twice():
    out = _translate(
        _start(
            _created(M1),
            _thought(M1, "Hmm, "),
            _created(M1),
            _thought(M1, "Hmm, "),
            _thought(M1, "yes."),
            _delta(M1, "Yes."),
            _message_done(M1, "Yes."),
            _end("completed"),
        )
    )
    deltas = [e["delta"] for e in out if e["type"] == "response.reasoning.delta"]
    assert deltas == ["Hmm, ", "yes."]
    assert out[-1]["response"]["output"][0]["content"][0]["text"] == "Hmm, yes."


def test_the_sse_frame_is_openais():
    (first, *_) = _translate(_start(_end("completed")))
    frame = sse_frame(first)
    assert frame.startswith("event: response.created\ndata: {")
    assert frame.endswith("}\n\n")
    assert frame.count("\n") == 3  # one line of JSON, whatever the text holds
