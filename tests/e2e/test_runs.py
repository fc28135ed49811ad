"""A reply produced by a real worker process through the real broker and event log."""

import json
import time

import pytest

from conversations import engine
from conversations.engine import eventlog
from conversations.errors import RunActive
from conversations.models import Message, Run
from tests.support.fake_openai import Script
from tests.support.stack_runs import run_wait, stored

pytestmark = pytest.mark.django_db(transaction=True)


def test_two_tool_rounds_complete_with_everything_stored_and_streamed(chat, workers, fake_openai):
    worker = workers()
    fake_openai.push(
        Script(tool_calls=[("call_a", "calculator", '{"expression": "6*7"}')]),
        Script(tool_calls=[("call_b", "current_time", '{"timezone": "UTC"}')]),
        Script(text="Six times seven is 42, and I checked the time too."),
    )

    _, run = engine.run_start(conversation=chat, content="What is 6*7, and what time is it?")
    run = run_wait(run, workers=[worker])

    assert run.status == Run.Status.COMPLETED, run.error
    messages = stored(chat)
    assert [(m.seq, m.role, bool(m.tool_calls)) for m in messages] == [
        (1, "user", False),
        (2, "assistant", True),
        (3, "tool", False),
        (4, "assistant", True),
        (5, "tool", False),
        (6, "assistant", False),
    ]
    assert messages[2].content == "42"
    assert messages[2].tool_call_id == "call_a"
    assert messages[5].content == "Six times seven is 42, and I checked the time too."
    assert run.iterations == 3
    assert run.usage["total_tokens"] == sum(m.usage["total_tokens"] for m in messages if m.usage)

    # The second model call saw the first tool's result, right after its call.
    second = fake_openai.requests[1].messages
    assert second[-2]["tool_calls"][0]["id"] == "call_a"
    assert second[-1] == {"role": "tool", "tool_call_id": "call_a", "content": "42"}

    log = eventlog.events_all(str(run.id))
    assert [e["sequence_number"] for e in log] == list(range(len(log)))
    assert log[0]["type"] == "run.created"
    assert log[-1]["type"] == "run.completed"
    assert log[-1]["run"]["status"] == "completed"
    texts = eventlog.message_texts(log)
    assert texts[str(messages[5].id)] == messages[5].content
    results = [e for e in log if e["type"] == "tool_result.completed"]
    assert (results[0]["call_id"], results[0]["output"]) == ("call_a", "42")
    completed_calls = [e for e in log if e["type"] == "tool_call.completed"]
    assert json.loads(completed_calls[0]["arguments"]) == {"expression": "6*7"}


def test_a_second_message_while_a_run_is_active_is_refused(chat, redis_url):
    # No worker: the first run stays queued.
    engine.run_start(conversation=chat, content="first")
    with pytest.raises(RunActive):
        engine.run_start(conversation=chat, content="second")
    assert [m.content for m in stored(chat)] == ["first"]


def test_the_iteration_limit_ends_the_run_incomplete(chat, workers, fake_openai):
    worker = workers(PARLEY_RUN_MAX_ITERATIONS="2")
    for i in range(3):
        fake_openai.push(Script(tool_calls=[(f"call_{i}", "calculator", '{"expression": "1+1"}')]))

    _, run = engine.run_start(conversation=chat, content="Keep adding forever")
    run = run_wait(run, workers=[worker])

    assert run.status == Run.Status.INCOMPLETE
    assert run.iterations == 2
    assert len(fake_openai.requests) == 2
    assert [m.role for m in stored(chat)] == ["user", "assistant", "tool", "assistant", "tool"]


def test_cancel_mid_stream_keeps_the_partial_reply(chat, workers, fake_openai):
    worker = workers()
    fake_openai.push(Script(text="word " * 400, tokens_per_second=40))

    _, run = engine.run_start(conversation=chat, content="Tell me a long story")
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if any(e["type"] == "message.delta" for e in eventlog.events_all(str(run.id))):
            break
        time.sleep(0.05)
    engine.run_cancel(run=run)
    run = run_wait(run, workers=[worker])

    assert run.status == Run.Status.CANCELLED
    reply = Message.objects.get(conversation=chat, role="assistant")
    assert 0 < len(reply.content) < len("word " * 400)
    # Stopped: the finish reason says so; the server's own fields so far are kept with it.
    assert reply.provider_payload == {"system_fingerprint": "fp_fake", "finish_reason": "cancelled"}
    log = eventlog.events_all(str(run.id))
    assert eventlog.message_texts(log)[str(reply.id)] == reply.content
    assert log[-1]["type"] == "run.cancelled"


def test_the_demo_provider_answers_offline_through_the_worker(chat, workers, fake_openai):
    worker = workers(OPENAI_API_KEY="", PARLEY_DEMO_TOKENS_PER_SECOND="0")

    _, run = engine.run_start(conversation=chat, content="What is 12*7?")
    run = run_wait(run, workers=[worker])

    assert run.status == Run.Status.COMPLETED, run.error
    roles = [m.role for m in stored(chat)]
    assert roles == ["user", "assistant", "tool", "assistant"]
    assert stored(chat)[2].content == "84"
    assert "84" in stored(chat)[3].content
    assert fake_openai.requests == []
