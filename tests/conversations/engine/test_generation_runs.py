"""A conversation's generation settings in the tool loop: the worker's step in-process, with
the real SDK against the fake upstream (or the demo model), and the model input at DEBUG.

A reply that reaches its token limit ends the run `incomplete` with the reason, keeping
what was written; the model input is logged with its text only when the operator asked.
"""

import logging
from typing import Any

import pytest

from accounts.models import User
from conversations import engine, services
from conversations.engine import eventlog, runner
from conversations.engine.llm.demo import DemoProvider
from conversations.models import Conversation, Message, Run
from tests.support.fake_openai import Script
from tests.support.steps import step_run

pytestmark = pytest.mark.django_db(transaction=True)

TEN_TOKENS = ["Once ", "upon ", "a ", "time ", "there ", "was ", "a ", "very ", "long ", "story."]


def reply_to(conversation: Conversation, content: str = "Tell me a story") -> Run:
    _, run = engine.run_start(conversation=conversation, content=content)
    step_run(str(run.id))
    run.refresh_from_db()
    return run


def chat(owner: User, **settings: Any) -> Conversation:
    return services.conversation_create(owner=owner, title="Stories", **settings)


def test_a_reply_at_its_token_limit_ends_the_run_incomplete_keeping_the_text(
    owner, redis_url, enqueued, upstream
):
    upstream.push(Script(text=TEN_TOKENS))
    conversation = chat(owner, max_output_tokens=4)

    run = reply_to(conversation)

    assert upstream.requests[0].body["max_completion_tokens"] == 4
    assert run.status == Run.Status.INCOMPLETE
    assert run.error is not None
    assert run.error["code"] == "max_output_tokens"
    assert "limit of 4 tokens" in run.error["message"]
    reply = Message.objects.get(conversation=conversation, role=Message.Role.ASSISTANT)
    assert reply.content == "Once upon a time "
    assert reply.provider_payload is not None
    assert reply.provider_payload["finish_reason"] == "length"
    log = eventlog.events_all(str(run.id))
    assert log[-1]["type"] == "run.incomplete"
    assert log[-1]["run"]["error"]["code"] == "max_output_tokens"
    assert eventlog.message_texts(log)[str(reply.id)] == reply.content
    assert enqueued == [str(run.id)]  # nothing more to do: no next step


def test_a_tool_call_cut_at_the_limit_is_not_run(owner, redis_url, enqueued, upstream):
    calls = [("call_1", "calculator", '{"expression": "12345 * 67890"}')]
    upstream.push(Script(text=["Let ", "me ", "work "], tool_calls=calls, argument_pieces=6))
    conversation = chat(owner, max_output_tokens=5)

    run = reply_to(conversation, "What is 12345 * 67890?")

    assert run.status == Run.Status.INCOMPLETE
    reply = Message.objects.get(conversation=conversation, role=Message.Role.ASSISTANT)
    assert reply.content == "Let me work "
    assert reply.tool_calls == []
    assert not Message.objects.filter(role=Message.Role.TOOL).exists()


def test_a_conversation_without_settings_gets_the_server_defaults(
    owner, redis_url, enqueued, upstream, settings
):
    settings.PARLEY_DEFAULT_MAX_OUTPUT_TOKENS = 1234
    settings.PARLEY_DEFAULT_TEMPERATURE = None
    conversation = chat(owner)

    run = reply_to(conversation)

    assert run.status == Run.Status.COMPLETED
    body = upstream.requests[0].body
    assert body["max_completion_tokens"] == 1234
    assert "temperature" not in body


def test_the_conversations_own_settings_reach_the_model(owner, redis_url, enqueued, upstream):
    conversation = chat(owner, temperature=0.2, max_output_tokens=900)
    reply_to(conversation)
    services.conversation_update(
        conversation=conversation, temperature=None, max_output_tokens=None
    )
    reply_to(conversation, "Another one")

    first, second = (request.body for request in upstream.requests)
    assert (first["temperature"], first["max_completion_tokens"]) == (0.2, 900)
    # Back to the server's defaults: no temperature is sent at all.
    assert "temperature" not in second
    assert second["max_completion_tokens"] == 4096


def test_stateless_chat_gets_the_server_defaults_and_a_cut_reply_is_incomplete(
    owner, upstream, settings
):
    settings.PARLEY_DEFAULT_MAX_OUTPUT_TOKENS = 3
    settings.PARLEY_DEFAULT_TEMPERATURE = 0.9
    upstream.push(Script(text=TEN_TOKENS))

    answer = engine.stateless_chat(
        user=owner, state=None, system="", messages=[{"role": "user", "content": "Go on"}]
    )

    body = upstream.requests[0].body
    assert (body["max_completion_tokens"], body["temperature"]) == (3, 0.9)
    assert answer.status == "incomplete"
    assert answer.reply == "Once upon a "


def test_the_iteration_limit_says_why_the_run_is_incomplete(
    owner, redis_url, enqueued, upstream, settings
):
    settings.PARLEY_RUN_MAX_ITERATIONS = 1
    upstream.push(Script(tool_calls=[("call_1", "calculator", '{"expression": "1+1"}')]))
    conversation = chat(owner)
    run = reply_to(conversation, "Add forever")
    for _ in range(2):  # the tools, then the step that finds the limit reached
        step_run(str(run.id))
    run.refresh_from_db()

    assert run.status == Run.Status.INCOMPLETE
    assert run.error is not None
    assert run.error["code"] == "max_iterations"
    assert "1 rounds of tool calls" in run.error["message"]


def test_the_demo_model_keeps_the_conversations_limit(
    owner, redis_url, enqueued, monkeypatch, settings
):
    monkeypatch.setattr(runner, "provider_get", lambda: DemoProvider(tokens_per_second=0))
    conversation = chat(owner, max_output_tokens=3)

    run = reply_to(conversation, "Hello there")

    assert run.status == Run.Status.INCOMPLETE
    assert run.error is not None
    assert run.error["code"] == "max_output_tokens"
    reply = Message.objects.get(conversation=conversation, role=Message.Role.ASSISTANT)
    assert len(reply.content.split()) == 3
    assert reply.usage is not None
    assert reply.usage["completion_tokens"] == 3


# --- the model input at DEBUG ---------------------------------------------------------------

SECRET_PROMPT = "You are the keeper of the blue door."
SECRET_MESSAGE = "My locker code is 4711"


def model_input_records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "conversations.engine.model_input_log"]


def test_with_content_logging_the_model_input_is_logged_with_its_text(
    owner, redis_url, enqueued, upstream, settings, caplog
):
    settings.PARLEY_LOG_CONTENT = True
    conversation = chat(owner, system_prompt=SECRET_PROMPT, max_output_tokens=50)
    caplog.set_level(logging.DEBUG, logger="conversations.engine")

    run = reply_to(conversation, SECRET_MESSAGE)

    (record,) = model_input_records(caplog)
    assert record.levelno == logging.DEBUG
    text = record.getMessage()
    assert f"run {run.id}" in text
    assert "max_output_tokens 50" in text
    assert f"system ({len(SECRET_PROMPT)} chars)" in text
    assert f"user ({len(SECRET_MESSAGE)} chars)" in text
    assert SECRET_PROMPT in text
    assert SECRET_MESSAGE in text


def test_without_content_logging_no_text_is_logged_at_any_level(
    owner, redis_url, enqueued, upstream, settings, caplog
):
    settings.PARLEY_LOG_CONTENT = False
    upstream.push(Script(text="Noted, your code is 4711."))
    conversation = chat(owner, system_prompt=SECRET_PROMPT)
    caplog.set_level(logging.DEBUG)  # every logger, every level

    reply_to(conversation, SECRET_MESSAGE)

    (record,) = model_input_records(caplog)
    text = record.getMessage()
    # How the input was made up is there, what was written is not.
    assert f"system ({len(SECRET_PROMPT)} chars)" in text
    assert f"user ({len(SECRET_MESSAGE)} chars)" in text
    assert "blue door" not in caplog.text
    assert "4711" not in caplog.text


def test_without_debug_the_model_input_is_not_logged(
    owner, redis_url, enqueued, upstream, settings, caplog
):
    settings.PARLEY_LOG_CONTENT = True
    caplog.set_level(logging.INFO)

    reply_to(chat(owner), SECRET_MESSAGE)

    assert model_input_records(caplog) == []
    assert SECRET_MESSAGE not in caplog.text
