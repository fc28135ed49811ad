"""The Open Responses checks themselves (tests/support/open_responses.py): they pass what
the specification allows and refuse, naming the schema and the value, what it does not;
and the suite-wide check of /openai/v1 answers (tests/support/open_responses_check.py)
reports a bad answer, from a JSON view, a stream or a live server's thread."""

import importlib
import json
from typing import Any

import httpx2 as httpx
import openai
import pytest
from asgiref.sync import sync_to_async
from django.core.asgi import get_asgi_application
from django.db import connections

from conversations.openai_api import errors
from conversations.openai_api.views import responses as response_views
from tests.support.fake_openai import Script
from tests.support.open_responses import (
    compaction_check,
    error_check,
    event_check,
    item_check,
    response_check,
    sse_check,
)
from tests.support.open_responses_check import JSON_CHECKS, Answers
from tests.support.openai_api import BASE, key_for

USAGE = {
    "input_tokens": 3,
    "input_tokens_details": {"cached_tokens": 0},
    "output_tokens": 2,
    "output_tokens_details": {"reasoning_tokens": 0},
    "total_tokens": 5,
}


def text_item(text: str = "Hi.") -> dict[str, Any]:
    part = {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
    return {"type": "message", "id": "msg_1", "status": "completed", "role": "assistant"} | {
        "content": [part]
    }


def response(**changes: Any) -> dict[str, Any]:
    """A response the specification allows, with `changes`."""
    valid = {
        "id": "resp_1",
        "object": "response",
        "created_at": 1,
        "completed_at": 2,
        "status": "completed",
        "incomplete_details": None,
        "model": "m",
        "previous_response_id": None,
        "instructions": None,
        "output": [text_item()],
        "error": None,
        "tools": [],
        "tool_choice": "auto",
        "truncation": "disabled",
        "parallel_tool_calls": True,
        "text": {"format": {"type": "text"}},
        "top_p": 1.0,
        "presence_penalty": 0.0,
        "frequency_penalty": 0.0,
        "top_logprobs": 0,
        "temperature": 1.0,
        "reasoning": None,
        "usage": USAGE,
        "max_output_tokens": None,
        "max_tool_calls": None,
        "store": True,
        "background": False,
        "service_tier": "default",
        "metadata": {},
        "safety_identifier": None,
        "prompt_cache_key": None,
    }
    return valid | changes


def stream_events(final: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """A whole stream's events: a short text reply."""
    started = response(status="in_progress", output=[], usage=None, completed_at=None)
    item = text_item("Hi.")
    added = {**item, "status": "in_progress", "content": []}
    at = {"item_id": "msg_1", "output_index": 0, "content_index": 0}
    kinds: list[dict[str, Any]] = [
        {"type": "response.created", "response": {**started, "status": "queued"}},
        {"type": "response.in_progress", "response": started},
        {"type": "response.output_item.added", "output_index": 0, "item": added},
        {"type": "response.content_part.added", **at, "part": item["content"][0] | {"text": ""}},
        {"type": "response.output_text.delta", **at, "delta": "Hi.", "logprobs": []},
        {"type": "response.output_text.done", **at, "text": "Hi.", "logprobs": []},
        {"type": "response.content_part.done", **at, "part": item["content"][0]},
        {"type": "response.output_item.done", "output_index": 0, "item": item},
        {"type": "response.completed", "response": final or response()},
    ]
    return [{**event, "sequence_number": n} for n, event in enumerate(kinds)]


def renumbered(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{**event, "sequence_number": n} for n, event in enumerate(events)]


def sse(events: list[dict[str, Any]], *, done: bool = True) -> str:
    frames = [f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events]
    return "".join(frames) + ("data: [DONE]\n\n" if done else "")


def refusal(check: Any, value: Any) -> str:
    with pytest.raises(AssertionError) as caught:
        check(value)
    return str(caught.value)


# --- objects -----------------------------------------------------------------------------


def test_what_the_specification_allows_passes():
    response_check(response())
    item_check(text_item())
    item_check(
        {"type": "function_call", "id": "fc_1", "call_id": "c", "name": "f", "arguments": "{}"}
        | {"status": "completed"}
    )
    compaction_check(
        {"id": "cmp_1", "object": "response.compaction", "created_at": 1, "usage": USAGE}
        | {"output": [{"type": "compaction", "id": "cmp_1", "encrypted_content": "x"}]}
    )
    error_check({"error": {"message": "No.", "type": "invalid_request_error"} | {
        "param": None, "code": None}})  # fmt: skip
    for event in stream_events():
        event_check(event)


def test_a_response_without_completed_at_is_refused_naming_the_schema():
    without = response()
    del without["completed_at"]
    said = refusal(response_check, without)
    assert "missing 'completed_at'" in said
    assert "#/components/schemas/ResponseResource/required" in said


def test_a_wrong_value_deep_inside_is_named_with_its_place_and_value():
    broken = response(output=[text_item() | {"content": [{"type": "output_text", "text": 7}]}])
    said = refusal(response_check, broken)
    assert "$.output[0].content[0]" in said
    assert "#/components/schemas/OutputTextContent/" in said
    assert "7 is not of type 'string'" in said or "missing 'annotations'" in said


def test_a_function_call_without_status_and_an_unknown_item_are_refused():
    call = {"type": "function_call", "id": "fc_1", "call_id": "c", "name": "f", "arguments": ""}
    assert "#/components/schemas/FunctionCall/required" in refusal(item_check, call)
    assert "'status'" in refusal(item_check, call)
    assert "ItemField" in refusal(item_check, {"type": "web_page", "id": "x"})


def test_usage_without_its_details_is_refused():
    usage = {"input_tokens": 1, "output_tokens": 1, "total_tokens": 2}
    said = refusal(response_check, response(usage=usage))
    assert "$.usage: missing 'input_tokens_details', 'output_tokens_details'" in said


def test_an_error_must_be_the_specifications_payload_alone():
    assert "'code'" in refusal(error_check, {"error": {"message": "x", "type": "t", "param": None}})
    payload = {"message": "x", "type": "t", "param": None, "code": None}
    assert 'must be {"error": {...}}' in refusal(error_check, {"error": payload, "more": 1})
    assert 'must be {"error": {...}}' in refusal(error_check, {"detail": "Not found."})


def test_an_event_type_the_specification_does_not_list_is_refused():
    said = refusal(event_check, {"type": "run.created", "sequence_number": 0})
    assert "'run.created' is not one the specification streams" in said
    delta = stream_events()[4] | {"delta": None}
    assert "ResponseOutputTextDeltaStreamingEvent" in refusal(event_check, delta)


# --- streams -----------------------------------------------------------------------------


def test_a_whole_stream_passes_even_in_chunks_split_anywhere():
    raw = sse(stream_events()).replace("\n\nevent:", "\n\n: keep-alive\n\nevent:", 1)
    sse_check(raw)
    encoded = raw.replace("Hi.", "Hé.").encode()
    sse_check([encoded[n : n + 7] for n in range(0, len(encoded), 7)])


def test_a_stream_without_done_is_refused():
    assert "does not end with `data: [DONE]`" in refusal(
        sse_check, sse(stream_events(), done=False)
    )


def test_a_stream_without_a_terminal_event_is_refused():
    said = refusal(sse_check, sse(stream_events()[:-1]))
    assert "no terminal event" in said


def test_frames_breaking_the_streams_rules_are_refused():
    events = stream_events()
    renamed = sse(events).replace("event: response.output_text.delta", "event: delta")
    assert "does not name the event's type" in refusal(sse_check, renamed)
    gap = sse(events[:3] + events[4:])
    assert "has sequence_number 4, not 3" in refusal(sse_check, gap)
    assert "the lifecycle has 'response.created'" in refusal(sse_check, sse(events[1:]))
    assert "after the terminal" in refusal(sse_check, sse([*events, events[-1]]))
    keep_alive = sse(events).replace("data: [DONE]", "event: ping\n\ndata: [DONE]")
    assert "without data that is not a comment" in refusal(sse_check, keep_alive)
    assert "after `data: [DONE]`" in refusal(sse_check, sse(events) + sse(events[:1], done=False))


def test_output_items_are_added_before_streamed_and_done_by_the_end():
    events = stream_events()
    not_added = sse(renumbered(events[:2] + events[3:]))
    assert "for output item 0, which is not open" in refusal(sse_check, not_added)
    not_done = sse(renumbered(events[:7] + events[8:]))
    assert "'response.completed' with output items [0] not done" in refusal(sse_check, not_done)


def test_a_completed_response_must_say_its_usage():
    said = refusal(sse_check, sse(stream_events(final=response(usage=None))))
    assert "response.completed has no usage" in said


def test_a_resumed_stream_goes_on_from_past_starting_after():
    events = stream_events()
    sse_check(sse(events[5:]), starting_after=4)
    assert "not 5" in refusal(lambda raw: sse_check(raw, starting_after=4), sse(events[6:]))


# --- every answer of the door, checked ---------------------------------------------------


def test_every_view_checked_is_one_the_door_has():
    """A view renamed or moved would otherwise leave its answers unchecked, silently."""
    for path, method in JSON_CHECKS:
        module, name = path.rsplit(".", 1)
        view = getattr(importlib.import_module(module), name)
        assert callable(getattr(view, method.lower(), None)), (path, method)


def _broken_response(monkeypatch: pytest.MonkeyPatch) -> None:
    """The door answers responses without `completed_at`."""
    whole = response_views.response_object

    def without(run: Any) -> dict[str, Any]:
        answer = dict(whole(run))
        answer.pop("completed_at")
        return answer

    monkeypatch.setattr(response_views, "response_object", without)


def _found_once(answers: Answers, needle: str) -> None:
    """The check reported the broken answer: taken back, so this test passes."""
    assert any(needle in problem for problem in answers.found), answers.found
    answers.found.clear()


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("worker")
def test_a_bad_json_answer_and_a_bad_error_are_reported(
    client, model, monkeypatch, open_responses_checked: Answers
):
    created = client.responses.create(model="m", input="Hello?")
    assert open_responses_checked.found == []
    _broken_response(monkeypatch)
    client.responses.retrieve(created.id)
    _found_once(open_responses_checked, "missing 'completed_at'")
    monkeypatch.setattr(errors, "error_body", lambda *args: {"detail": "Not found."})
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve("resp_" + "0" * 32)
    _found_once(open_responses_checked, 'must be {"error": {...}}')


def _frames_unnamed(event: dict[str, Any]) -> str:
    """Frames without their `event:` line."""
    return f"data: {json.dumps(event)}\n\n"


BAD_FRAME = "`event: ` does not name the event's type"


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("worker")
def test_a_bad_stream_is_reported_as_it_passes(
    raw, model, monkeypatch, open_responses_checked: Answers
):
    monkeypatch.setattr(response_views, "sse_frame", _frames_unnamed)
    model.push(Script(text="Streamed."))
    body = {"model": "m", "input": "Hi", "stream": True}
    with raw.stream("POST", "/responses", json=body) as answer:
        assert "Streamed." in "".join(answer.iter_text())
    _found_once(open_responses_checked, BAD_FRAME)


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("worker")
async def test_a_bad_stream_under_asgi_is_reported_too(
    owner, model, monkeypatch, open_responses_checked: Answers
):
    monkeypatch.setattr(response_views, "sse_frame", _frames_unnamed)
    model.push(Script(text="Streamed."))
    key = await sync_to_async(key_for)(owner)
    transport = httpx.ASGITransport(app=get_asgi_application())  # type: ignore[arg-type]
    headers = {"Authorization": f"Bearer {key}"}
    try:
        async with httpx.AsyncClient(base_url=BASE, transport=transport, headers=headers) as http:
            answer = await http.post(
                "/responses", json={"model": "m", "input": "Hi", "stream": True}
            )
        assert "Streamed." in answer.text
    finally:
        await sync_to_async(connections.close_all)()
    _found_once(open_responses_checked, BAD_FRAME)


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("worker")
def test_a_live_servers_bad_answer_fails_the_test_too(
    live_server, owner, model, monkeypatch, open_responses_checked: Answers
):
    _broken_response(monkeypatch)
    headers = {"Authorization": f"Bearer {key_for(owner)}"}
    url = f"{live_server.url}/openai/v1/responses"
    created = httpx.post(url, json={"model": "m", "input": "Hi"}, headers=headers, timeout=30)
    assert created.status_code == 200
    assert "completed_at" not in created.json()
    _found_once(open_responses_checked, "missing 'completed_at'")
