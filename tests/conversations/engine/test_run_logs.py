"""A run's log lines: the request that started it and the run itself, on every line its
steps log, carried to the worker in each step's task headers; and never a word of the
conversation unless PARLEY_LOG_CONTENT is on.

The web request is a real API request; each step is the real task, applied in the test
process in a context of its own (as a worker's thread would be) with the headers it was
sent with; the model is the fake upstream behind the real SDK.
"""

import asyncio
import contextvars
import logging
from collections.abc import Iterator
from typing import Any

import pytest
from celery import current_app
from channels.testing import WebsocketCommunicator
from rest_framework.test import APIClient

from accounts import services as account_services
from config.log_context import LOG_IDS, LogIdsFilter
from conversations import tasks, tools
from conversations.models import Conversation, Run
from conversations.tools.registry import ToolContext, tool
from tests.support.fake_openai import Script
from tests.support.steps import replies_stored

pytestmark = pytest.mark.django_db(transaction=True)

MARKER = "zebra-umbrella-8812"
tool_log = logging.getLogger("tests.conversations.tools")


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """The step tasks the engine sends to the broker: name, arguments and headers."""
    messages: list[dict[str, Any]] = []

    def send_task(name, args=(), countdown=0, headers=None, **options):
        messages.append({"name": name, "args": tuple(args), "headers": dict(headers or {})})

    monkeypatch.setattr(current_app, "send_task", send_task)
    return messages


@pytest.fixture
def lookup_tools() -> Iterator[None]:
    with tools.isolated_registry():

        @tool
        def look_up(context: ToolContext, query: str) -> str:
            """Finds what the query names."""
            tool_log.info("looking up a query of %d characters", len(query))
            return f"found {query}"

        @tool
        def fail_on(context: ToolContext, query: str) -> str:
            """Fails, naming the query."""
            raise ValueError(f"nothing known about {query}")

        yield


@pytest.fixture
def lines(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    """Every record at every level, with the ids the configured handler would write."""
    caplog.handler.addFilter(LogIdsFilter())
    caplog.set_level(logging.DEBUG)
    return caplog


def ids(record: logging.LogRecord) -> dict[str, str | None]:
    return {name: record.__dict__.get(name) for name in LOG_IDS}


def logged_in(user) -> APIClient:
    client = APIClient()
    client.force_login(user)
    return client


def tool_chat(owner) -> Conversation:
    conversation = Conversation.objects.create(owner=owner, title="Lookups", model="gpt-test")
    Conversation.objects.filter(pk=conversation.pk).update(tools=["look_up", "fail_on"])
    conversation.refresh_from_db()
    return conversation


def run_steps(sent: list[dict[str, Any]]) -> int:
    """Run every step sent so far, and those they send, as a worker does: the task, in a
    fresh context (nothing of the test's), with the headers its message carried."""
    done = 0
    while done < len(sent):
        message = sent[done]
        assert message["name"] == tasks.run_step.name
        apply = tasks.run_step.apply
        contextvars.Context().run(apply, args=message["args"], headers=message["headers"])
        replies_stored()
        done += 1
    return done


def post_message(api, conversation: Conversation, content: str, **headers: str) -> Run:
    response = api.post(
        f"/api/v1/conversations/{conversation.pk}/messages/",
        {"content": content},
        format="json",
        **headers,
    )
    assert response.status_code == 202, response.content
    return Run.objects.get(pk=response.json()["run"]["id"])


def ask_for_both_tools(upstream) -> None:
    arguments = f'{{"query": "{MARKER}"}}'
    upstream.push(
        Script(tool_calls=[("call_1", "look_up", arguments), ("call_2", "fail_on", arguments)]),
        Script(text=f"I found {MARKER} for you."),
    )


def test_a_runs_steps_log_the_request_that_started_it_and_the_run(
    owner, redis_url, upstream, sent, lookup_tools, lines
):
    conversation = tool_chat(owner)
    ask_for_both_tools(upstream)

    run = post_message(
        logged_in(owner), conversation, "Look it up", HTTP_X_REQUEST_ID="req-from-lb"
    )
    lines.clear()  # from here on: the worker's lines
    steps = run_steps(sent)

    run.refresh_from_db()
    assert run.status == Run.Status.COMPLETED
    # Model call, tools, model call: each step sent with the request's id, the first by
    # the web request, the next ones by the step before.
    assert steps == 3
    assert [m["args"] for m in sent] == [(str(run.id),)] * 3
    assert [m["headers"] for m in sent] == [{"parley_request_id": "req-from-lb"}] * 3
    ours = [r for r in lines.records if r.name.startswith(("conversations", "tests"))]
    kinds = {r.name for r in ours}
    # Both model calls' inputs (DEBUG), the tool's own line (in the tool's thread) and the
    # failing tool's warning.
    assert {
        "conversations.engine.model_input_log",
        "tests.conversations.tools",
        "conversations.tools.execute",
    } <= kinds
    for record in ours:
        assert ids(record) == {
            "request_id": "req-from-lb",
            "user_id": str(owner.pk),
            "conversation_id": str(conversation.pk),
            "run_id": str(run.id),
        }, record.getMessage()


def test_the_api_answers_with_the_request_id(owner, redis_url, sent, lookup_tools):
    conversation = tool_chat(owner)
    response = logged_in(owner).post(
        f"/api/v1/conversations/{conversation.pk}/messages/",
        {"content": "hello"},
        format="json",
        HTTP_X_REQUEST_ID="client-req-9",
    )
    assert response.status_code == 202
    assert response["X-Request-ID"] == "client-req-9"
    assert sent[0]["headers"] == {"parley_request_id": "client-req-9"}


def test_a_step_sent_without_a_request_id_logs_none(
    owner, redis_url, upstream, sent, lookup_tools, lines
):
    # A step the watchdog sent again (or one queued before this release) carries no id.
    conversation = tool_chat(owner)
    upstream.push(Script(text="Hello there."))
    run = post_message(logged_in(owner), conversation, "Hi")
    sent[0]["headers"] = {}
    lines.clear()

    run_steps(sent)

    records = [r for r in lines.records if r.name == "conversations.engine.model_input_log"]
    assert records
    assert {(ids(r)["request_id"], ids(r)["run_id"]) for r in records} == {(None, str(run.id))}


def test_a_socket_starts_runs_under_its_request_id(owner, redis_url, sent, lookup_tools):
    from asgiref.sync import async_to_sync

    from config.asgi import application

    conversation = tool_chat(owner)
    _, secret = account_services.api_key_create(owner=owner, name="tests")

    @async_to_sync
    async def send_a_message() -> None:
        ws = WebsocketCommunicator(
            application,
            f"/ws/conversations/{conversation.pk}/",
            headers=[(b"authorization", f"Bearer {secret}".encode()), (b"x-request-id", b"ws-1")],
        )
        connected, _ = await ws.connect()
        assert connected
        assert (await ws.receive_json_from(timeout=5))["type"] == "conversation.connected"
        await ws.send_json_to({"type": "message.create", "content": "Hello"})
        for _ in range(250):  # the run starts in a database thread
            if sent:
                break
            await asyncio.sleep(0.02)
        await ws.disconnect()

    send_a_message()

    assert sent[0]["headers"] == {"parley_request_id": "ws-1"}


# --- no message text ---------------------------------------------------------------------


def everything_logged(caplog: pytest.LogCaptureFixture) -> str:
    """Each record's message and exception, as any handler could write them."""
    formatter = logging.Formatter("%(message)s")
    return "\n".join(formatter.format(r) for r in caplog.records) + caplog.text


@pytest.mark.parametrize("content_logged", [False, True])
def test_no_message_text_is_logged_during_a_run_unless_asked_for(
    owner, redis_url, upstream, sent, lookup_tools, lines, settings, content_logged
):
    settings.PARLEY_LOG_CONTENT = content_logged
    conversation = tool_chat(owner)
    ask_for_both_tools(upstream)

    run = post_message(logged_in(owner), conversation, f"What do you know about {MARKER}?")
    run_steps(sent)

    run.refresh_from_db()
    assert run.status == Run.Status.COMPLETED
    # The message, the tool calls' arguments and outputs, the failing tool's error and the
    # reply all carry the marker: with content logging on, some of it is logged (so these
    # records are seen), and with it off none of it is.
    logged = everything_logged(lines)
    assert (MARKER in logged) is content_logged
    if not content_logged:
        assert "ValueError (its message is not logged" in logged
