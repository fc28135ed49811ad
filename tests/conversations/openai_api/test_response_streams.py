"""Streamed responses: OpenAI's events, numbered without gaps, derived from the run's
event log, so the same log always streams the same events and a reader resumes anywhere."""

import json
import time
from typing import Any

import httpx2 as httpx
import openai
import pytest
from openai.types.responses import Response, ResponseStreamEvent

from conversations.models import Run
from tests.support.fake_openai import Script
from tests.support.openai_api import sse_events
from tests.support.sdk_types import assert_sdk_shape
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("worker")]

WEATHER: Any = {
    "type": "function",
    "name": "get_weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
}


def events_of(client: openai.OpenAI, **kwargs) -> list[dict]:
    with client.responses.with_streaming_response.retrieve(stream=True, **kwargs) as answer:
        return sse_events(answer.iter_lines())


def test_a_streamed_response_with_the_sdks_helpers(client, model):
    model.push(Script(text="Streaming works fine."))
    with client.responses.stream(model="m", input="Stream, please.") as stream:
        events = list(stream)
        final = stream.get_final_response()
    kinds = [event.type for event in events]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] == "response.completed"
    assert "response.output_text.delta" in kinds
    assert "response.content_part.done" in kinds
    assert [event.sequence_number for event in events] == list(range(len(events)))
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == final.output_text == "Streaming works fine."
    assert final.status == "completed"
    # The stored response says the same as the stream's last event.
    stored = client.responses.retrieve(final.id)
    assert [item.id for item in stored.output] == [item.id for item in final.output]
    assert stored.output_text == final.output_text
    assert stored.usage == final.usage


def test_every_event_has_the_sdks_required_fields_and_replays_identically(client, model):
    model.push(
        Script(
            text="Let me check.", tool_calls=[("call_1", "calculator", '{"expression": "1+1"}')]
        ),
        Script(text="Two."),
    )
    with client.responses.with_streaming_response.create(
        model="m", input="1+1?", stream=True
    ) as answer:
        first = sse_events(answer.iter_lines())
    for event in first:
        assert_sdk_shape(ResponseStreamEvent, event)
    assert_sdk_shape(Response, first[-1]["response"])
    kinds = [event["type"] for event in first]
    assert "response.function_call_arguments.done" in kinds
    response_id = first[0]["response"]["id"]
    # Replayed from the log: the very same events, and from any point the same suffix.
    assert events_of(client, response_id=response_id) == first
    assert events_of(client, response_id=response_id, starting_after=5) == first[6:]


def test_a_client_tool_call_streams_its_arguments(client, model):
    model.push(Script(tool_calls=[("call_w", "get_weather", '{"city": "Oslo"}')]))
    with client.responses.stream(model="m", input="Weather?", tools=[WEATHER]) as stream:
        events = list(stream)
        final = stream.get_final_response()
    deltas = "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta")
    assert json.loads(deltas) == {"city": "Oslo"}
    [call] = final.output
    assert call.type == "function_call"
    assert call.status == "completed"
    assert final.status == "completed"


def test_background_resume_after_a_cut_and_cancel(client, model):
    model.push(Script(text="word " * 200, tokens_per_second=100))
    started = client.responses.create(model="m", input="Talk a while.", background=True)
    assert started.background is True
    assert started.status in ("queued", "in_progress")
    # A reader that was cut after a few events resumes from where it stopped.
    stream = client.responses.retrieve(started.id, stream=True)
    seen = []
    for event in stream:
        seen.append(event)
        if len(seen) == 8:
            break
    stream.close()
    resumed = client.responses.retrieve(
        started.id, stream=True, starting_after=seen[-1].sequence_number
    )
    cancelled = client.responses.cancel(started.id)
    assert cancelled.id == started.id
    rest = list(resumed)
    numbers = [event.sequence_number for event in seen + rest]
    assert numbers == list(range(len(numbers)))
    assert rest[-1].type == "response.failed"
    assert rest[-1].response.status == "cancelled"
    wait_until(lambda: not Run.objects.get().is_active, timeout=10, what="the run to end")
    final = client.responses.retrieve(started.id)
    assert final.status == "cancelled"
    assert final.output_text.startswith("word word")


def test_store_false_streams_too(client, model):
    model.push(Script(text="Nothing kept."))
    with client.responses.stream(model="m", input="Hi", store=False) as stream:
        final = stream.get_final_response()
    assert final.output_text == "Nothing kept."
    assert not Run.objects.exists()


def test_the_raw_sse_framing(raw, model):
    model.push(Script(text="Raw bytes."))
    started = time.monotonic()
    with raw.stream(
        "POST", "/responses", json={"model": "m", "input": "Hi", "stream": True}
    ) as answer:
        assert answer.status_code == 200
        assert answer.headers["content-type"].startswith("text/event-stream")
        body = "".join(answer.iter_text())
    assert time.monotonic() - started < 30
    frames = [frame for frame in body.split("\n\n") if frame]
    assert frames.pop() == "data: [DONE]"
    for number, frame in enumerate(frames):
        event_line, data_line = frame.split("\n")
        assert event_line.startswith("event: ")
        assert data_line.startswith("data: ")
        data = json.loads(data_line.removeprefix("data: "))
        assert data["type"] == event_line.removeprefix("event: ")
        assert data["sequence_number"] == number
    assert json.loads(frames[-1].split("\n")[1][6:])["response"]["output"][0]["content"][0][
        "text"
    ] == ("Raw bytes.")


def test_a_stream_of_an_unknown_response_is_a_json_404(raw):
    answer = raw.get("/responses/resp_" + "1" * 32, params={"stream": "true"})
    assert answer.status_code == 404
    assert answer.json()["error"]["code"] == "not_found"
    assert isinstance(answer, httpx.Response)
