"""The official SDK against live processes: Daphne, a real Celery worker, Redis, the
database and the fake upstream. Streams, tools, background responses resumed on another
web process, cancel and `store: false`, as a deployed program sees them."""

import json
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from accounts import services as account_services
from conversations.models import Conversation, Message, Run
from tests.support.fake_openai import FakeOpenAI, Script
from tests.support.waiting import wait_until
from tests.support.web_server import WebServer, web_start
from tests.support.workers import WorkerFactory

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("fresh_throttles"),
]

WEATHER: Any = {
    "type": "function",
    "name": "get_weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
}


def _web(redis_url: str, fake_openai: FakeOpenAI) -> WebServer:
    # The web process runs `store: false` responses itself, so it knows the upstream too.
    env = {"OPENAI_API_KEY": "k", "OPENAI_BASE_URL": fake_openai.base_url}
    return web_start(redis_url=redis_url, env={**env, "OPENAI_MAX_RETRIES": "0"})


@pytest.fixture
def web(redis_url: str, fake_openai: FakeOpenAI) -> Iterator[WebServer]:
    server = _web(redis_url, fake_openai)
    yield server
    server.stop()


@pytest.fixture
def web_b(redis_url: str, fake_openai: FakeOpenAI) -> Iterator[WebServer]:
    server = _web(redis_url, fake_openai)
    yield server
    server.stop()


@pytest.fixture
def key(owner) -> str:
    return account_services.api_key_create(owner=owner, name="e2e")[1]


def sdk(server: WebServer, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.http_url}/openai/v1", api_key=key, max_retries=0)


@pytest.fixture
def worker(workers: WorkerFactory):
    return workers()


def test_stream_tools_and_store_false(web, worker, key, fake_openai, owner):
    client = sdk(web, key)
    fake_openai.push(
        Script(text="Let me count.", tool_calls=[("c1", "calculator", '{"expression": "3*3"}')]),
        Script(text="It is 9.", tokens_per_second=200),
    )
    with client.responses.stream(model="m", input="3*3?") as stream:
        events = list(stream)
        final = stream.get_final_response()
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert final.status == "completed"
    assert [item.type for item in final.output] == [
        "message",
        "function_call",
        "function_call_output",
        "message",
    ]
    assert final.output_text.endswith("It is 9.")
    # A client tool: the response completes with the call; the answer continues it.
    fake_openai.push(
        Script(tool_calls=[("w1", "get_weather", '{"city": "Rome"}')]),
        Script(text="Warm in Rome."),
    )
    asked = client.responses.create(model="m", input="Weather in Rome?", tools=[WEATHER])
    assert [item.type for item in asked.output] == ["function_call"]
    answered = client.responses.create(
        model="m",
        previous_response_id=asked.id,
        tools=[WEATHER],
        input=[{"type": "function_call_output", "call_id": "w1", "output": "warm"}],
    )
    assert answered.output_text == "Warm in Rome."
    # store: false keeps nothing, in the web process's own loop.
    counts = (Conversation.objects.count(), Message.objects.count(), Run.objects.count())
    fake_openai.push(Script(text="Gone."))
    assert client.responses.create(model="m", input="x", store=False).output_text == "Gone."
    assert (Conversation.objects.count(), Message.objects.count(), Run.objects.count()) == counts


def test_background_resumed_on_another_web_process_then_cancelled(
    web, web_b, worker, key, fake_openai
):
    fake_openai.push(Script(text="tick " * 400, tokens_per_second=80))
    started = sdk(web, key).responses.create(model="m", input="Tick.", background=True)
    seen = []
    with sdk(web, key).responses.retrieve(started.id, stream=True) as stream:
        for event in stream:
            seen.append(event)
            if sum(e.type == "response.output_text.delta" for e in seen) >= 3:
                break  # the connection is cut here
    other = sdk(web_b, key)
    resumed = other.responses.retrieve(
        started.id, stream=True, starting_after=seen[-1].sequence_number
    )
    first = next(iter(resumed))
    assert first.sequence_number == seen[-1].sequence_number + 1
    other.responses.cancel(started.id)
    rest = [first, *resumed]
    numbers = [e.sequence_number for e in seen + rest]
    assert numbers == list(range(len(numbers)))
    assert rest[-1].response.status == "cancelled"
    wait_until(
        lambda: other.responses.retrieve(started.id).status == "cancelled",
        timeout=10,
        what="the response to say cancelled",
    )
    text = "".join(e.delta for e in seen + rest if e.type == "response.output_text.delta")
    assert other.responses.retrieve(started.id).output_text == text
    assert json.loads(rest[-1].response.model_dump_json())["status"] == "cancelled"
