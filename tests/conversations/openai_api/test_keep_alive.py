"""A silent response stream sends SSE comments (`: keep-alive`) so idle proxies keep the
connection open, under WSGI and ASGI alike; the SDK skips them. Raw httpx reads the
framing; the runs' logs are written by hand, the model's silence a pause between writes."""

import json
import threading
import time
import uuid
from typing import Any

import httpx2 as httpx
import pytest
from asgiref.sync import sync_to_async
from django.core.asgi import get_asgi_application
from django.db import connections

from conversations.engine import eventlog
from conversations.models import Run
from conversations.serializers import run_payload
from tests.support.events import message_dict
from tests.support.openai_api import BASE, key_for

SILENCE = 1.0  # seconds between the run's first event and the rest
INTERVAL = 0.1  # the keep-alive interval for these tests


@pytest.fixture(autouse=True)
def short_keep_alives(settings: Any, redis_url: str) -> None:
    settings.PARLEY_STREAM_KEEPALIVE_SECONDS = INTERVAL


# What a real run's end reports once the model has answered.
USAGE = {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}


def _silent_run(conversation) -> Run:
    """A run in progress whose log says only that it started; the rest of its reply is
    written after SILENCE, by another thread, as a worker would."""
    run = Run.objects.create(conversation=conversation, status="in_progress", model="m")
    writer = eventlog.EventWriter.open(str(run.pk), coalesce_ms=0)
    writer.emit(eventlog.RUN_CREATED, run=run_payload(run))
    writer.emit(eventlog.RUN_IN_PROGRESS, run=run_payload(run))
    ended = run_payload(run) | {"status": "completed", "usage": USAGE}
    message_id = str(uuid.uuid4())

    def reply() -> None:
        time.sleep(SILENCE)
        writer.emit(eventlog.MESSAGE_CREATED, message_id=message_id, role="assistant", attempt=1)
        writer.message_delta(message_id, "At last.")
        writer.flush()
        message = message_dict(message_id, "At last.")
        writer.emit(eventlog.MESSAGE_COMPLETED, message=message)
        writer.emit(eventlog.RUN_COMPLETED, run=ended)

    threading.Thread(target=reply, daemon=True).start()
    return run


def _blocks(body: str) -> list[str]:
    return [block for block in body.split("\n\n") if block]


def _events(blocks: list[str]) -> list[dict[str, Any]]:
    events = []
    for block in blocks:
        if block.startswith(":") or block == "data: [DONE]":
            continue
        kind, data = block.split("\n")
        event = json.loads(data.removeprefix("data: "))
        assert kind == f"event: {event['type']}"
        events.append(event)
    return events


def _check(body: str, run: Run) -> None:
    blocks = _blocks(body)
    events = _events(blocks)
    assert events[0]["type"] == "response.created"
    assert events[-1]["type"] == "response.completed"
    assert events[-1]["response"]["output"][0]["content"][0]["text"] == "At last."
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    # Comments fill the silence after the first event, and only there.
    first_text = next(n for n, b in enumerate(blocks) if "output_item.added" in b)
    comments = [n for n, block in enumerate(blocks) if block.startswith(":")]
    assert len(comments) >= 2, blocks
    assert all(block == ": keep-alive" for block in blocks if block.startswith(":"))
    assert min(comments) > 0
    assert max(comments) < first_text
    assert events[-1]["response"]["id"] == f"resp_{run.pk.hex}"


def test_a_silent_stream_keeps_alive_under_wsgi(raw, conversation, client):
    run = _silent_run(conversation)
    with raw.stream("GET", f"/responses/resp_{run.pk.hex}", params={"stream": "true"}) as answer:
        assert answer.status_code == 200
        assert answer.headers["content-type"].startswith("text/event-stream")
        body = answer.read().decode()
    _check(body, run)
    # The SDK reads the same stream and skips the comments.
    events = list(client.responses.retrieve(f"resp_{run.pk.hex}", stream=True))
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert events[-1].type == "response.completed"


@pytest.mark.django_db(transaction=True)
async def test_a_silent_stream_keeps_alive_under_asgi(conversation, owner):
    run = await sync_to_async(_silent_run)(conversation)
    key = await sync_to_async(key_for)(owner)
    transport = httpx.ASGITransport(app=get_asgi_application())  # type: ignore[arg-type]
    headers = {"Authorization": f"Bearer {key}"}
    try:
        async with httpx.AsyncClient(base_url=BASE, transport=transport, headers=headers) as http:
            answer = await http.get(f"/responses/resp_{run.pk.hex}", params={"stream": "true"})
        assert answer.status_code == 200
        _check(answer.text, run)
    finally:
        await sync_to_async(connections.close_all)()


def test_a_finished_stream_replayed_has_no_comments(raw, conversation):
    run = _silent_run(conversation)
    url = f"/responses/resp_{run.pk.hex}"
    raw.get(url, params={"stream": "true"}).read()  # waits for the end
    again = raw.get(url, params={"stream": "true", "starting_after": "2"}).text
    assert not any(block.startswith(":") for block in _blocks(again))
    assert _events(_blocks(again))[0]["sequence_number"] == 3
