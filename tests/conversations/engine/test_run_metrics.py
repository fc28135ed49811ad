"""/metrics moves when runs run: the worker's step in-process with the real SDK against the
fake upstream, the counts read back from `GET /metrics` before and after, as a scraper
would read them."""

from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

from accounts.models import User
from conversations import engine, services
from conversations.engine import eventlog
from conversations.models import Run
from tests.support.fake_openai import Script
from tests.support.sockets import connect_as
from tests.support.steps import step_run

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("close_thread_connections"),
]

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(client: Client) -> Samples:
    response = client.get("/metrics")
    assert response.status_code == 200, response.content
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(response.content.decode())
        for sample in family.samples
    }


def moved(before: Samples, after: Samples, name: str, **labels: str) -> float:
    key = (name, frozenset(labels.items()))
    return after.get(key, 0.0) - before.get(key, 0.0)


def run_to_the_end(owner: User, enqueued: list[str], content: str) -> Run:
    conversation = services.conversation_create(owner=owner, title="Sums")
    _, run = engine.run_start(conversation=conversation, content=content)
    while enqueued:  # the steps a worker would take, one after another
        step_run(enqueued.pop(0))
    run.refresh_from_db()
    return run


def test_a_run_with_a_tool_call_moves_every_count(owner, redis_url, enqueued, upstream, client):
    # The first reply only asks for a tool; the words come with the second model call.
    upstream.push(
        Script(tool_calls=[("call_1", "calculator", '{"expression": "6*7"}')]),
        Script(text="Six times seven is 42."),
    )
    before = scrape(client)

    run = run_to_the_end(owner, enqueued, "What is 6*7?")

    after = scrape(client)
    assert run.status == Run.Status.COMPLETED
    assert moved(before, after, "parley_runs_started_total") == 1
    assert moved(before, after, "parley_runs_ended_total", status="completed") == 1
    assert moved(before, after, "parley_runs_ended_total", status="failed") == 0
    # Every event of the run's log is one write here (nothing else wrote meanwhile).
    events = eventlog.events_all(str(run.id))
    assert moved(before, after, "parley_event_log_writes_total") == len(events)
    # Time to first token: once per run, taken at the second call's first words.
    assert moved(before, after, "parley_run_time_to_first_token_seconds_count") == 1
    first_words = moved(before, after, "parley_run_time_to_first_token_seconds_sum")
    duration = moved(before, after, "parley_run_duration_seconds_sum", status="completed")
    assert moved(before, after, "parley_run_duration_seconds_count", status="completed") == 1
    assert 0 < first_words <= duration
    assert moved(before, after, "parley_tool_calls_total", tool="calculator", outcome="ok") == 1
    errors = [key for key in after if key[0] == "parley_provider_errors_total"]
    assert all(moved(before, after, name, **dict(labels)) == 0 for name, labels in errors)


def test_a_provider_error_is_counted_by_its_code(owner, redis_url, enqueued, upstream, client):
    upstream.push(Script.http(500))
    before = scrape(client)

    run = run_to_the_end(owner, enqueued, "Hello?")

    after = scrape(client)
    assert run.status == Run.Status.FAILED
    assert run.error is not None
    code = run.error["code"]
    assert moved(before, after, "parley_provider_errors_total", code=code) == 1
    assert moved(before, after, "parley_runs_ended_total", status="failed") == 1
    # No words came, so there was no first token to time.
    assert moved(before, after, "parley_run_time_to_first_token_seconds_count") == 0


def test_a_refused_tool_call_counts_as_refused_under_a_bounded_name(
    owner, redis_url, enqueued, upstream, client
):
    upstream.push(
        Script(tool_calls=[("call_1", "made_up_tool", "{}")]),
        Script(tool_calls=[("call_2", "calculator", '{"expression": ')]),
        Script(text="Sorry."),
    )
    before = scrape(client)

    run_to_the_end(owner, enqueued, "Try things")

    after = scrape(client)
    assert moved(before, after, "parley_tool_calls_total", tool="unknown", outcome="refused") == 1
    refused = moved(before, after, "parley_tool_calls_total", tool="calculator", outcome="refused")
    assert refused == 1
    assert not any(dict(labels).get("tool") == "made_up_tool" for _, labels in after)


async def test_open_websockets_are_counted_while_open(owner, conversation, redis_url):
    client = Client()

    async def open_sockets() -> float:
        samples: dict[Any, float] = await sync_to_async(scrape)(client)
        return samples[("parley_websockets_open", frozenset())]

    before = await open_sockets()
    first = await connect_as(owner, conversation.pk)
    second = await connect_as(owner, conversation.pk)
    assert await open_sockets() == before + 2

    await first.disconnect()
    assert await open_sockets() == before + 1
    await second.disconnect()
    assert await open_sockets() == before
