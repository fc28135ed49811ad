"""A reasoning model's reply in the tool loop, and the server's own fields kept with it: the
worker's step in-process, with the real SDK against the fake upstream over HTTP.

The thoughts stream as `reasoning.delta` events before the answer, are stored on the reply
(with how long the model thought) and shown in every message payload, but never go back
to the model and never into a fine-tuning line.
"""

import json
import uuid

import pytest
from django.test import Client

from conversations import engine
from conversations.engine import eventlog, stateless
from conversations.formats.exporting import export_jsonl_lines
from conversations.models import Conversation, Message, Run
from tests.support.fake_openai import Script
from tests.support.steps import step_run

pytestmark = pytest.mark.django_db(transaction=True)

THOUGHTS = ["The user ", "greets me; ", "a short ", "greeting ", "back fits."]
THOUGHT = "".join(THOUGHTS)
ANSWER = ["Hello ", "to you ", "too!"]
TIMINGS = {"prompt_n": 12, "predicted_n": 8, "predicted_per_second": 40.5}


def reply_to(conversation: Conversation, content: str = "Hi there") -> Run:
    _, run = engine.run_start(conversation=conversation, content=content)
    step_run(str(run.id))
    run.refresh_from_db()
    return run


def assistant(run: Run) -> Message:
    return Message.objects.get(run=run, role="assistant")


@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
def test_thoughts_stream_as_events_are_stored_and_never_sent_back(
    conversation, redis_url, enqueued, upstream, field
):
    upstream.push(
        Script(reasoning=THOUGHTS, reasoning_field=field, text=ANSWER, tokens_per_second=25),
        Script(text="Fine, thanks."),
    )

    run = reply_to(conversation)

    assert run.status == Run.Status.COMPLETED
    reply = assistant(run)
    assert reply.content == "".join(ANSWER)
    assert reply.reasoning == THOUGHT
    # Five thoughts at 25 tokens a second: the answer began ~0.2 s after the first one.
    assert reply.reasoning_ms is not None
    assert 100 <= reply.reasoning_ms < 5_000
    log = eventlog.events_all(str(run.id))
    thoughts = [e for e in log if e["type"] == eventlog.REASONING_DELTA]
    assert thoughts
    assert {e["message_id"] for e in thoughts} == {str(reply.id)}
    assert "".join(e["delta"] for e in thoughts) == THOUGHT
    first_answer = next(e["sequence_number"] for e in log if e["type"] == "message.delta")
    assert all(e["sequence_number"] < first_answer for e in thoughts)
    assert eventlog.message_texts(log)[str(reply.id)] == reply.content  # no thoughts in it
    completed = next(e for e in log if e["type"] == "message.completed")["message"]
    assert (completed["reasoning"], completed["reasoning_ms"]) == (THOUGHT, reply.reasoning_ms)

    reply_to(conversation, "How are you?")

    sent = upstream.requests[1].messages
    assert {"role": "assistant", "content": "".join(ANSWER)} in sent
    assert all(set(m) <= {"role", "content", "tool_calls", "tool_call_id"} for m in sent)
    assert "greets me" not in json.dumps(sent)


def test_the_messages_list_carries_the_thoughts_and_the_fine_tuning_line_does_not(
    conversation, owner, redis_url, enqueued, upstream
):
    upstream.push(Script(reasoning=THOUGHTS, text=ANSWER))
    run = reply_to(conversation)
    client = Client()
    client.force_login(owner)

    listed = client.get(f"/api/v1/conversations/{conversation.pk}/messages/").json()

    user, reply = listed["results"]
    assert (user["reasoning"], user["reasoning_ms"]) == ("", None)
    assert reply["content"] == "".join(ANSWER)
    assert reply["reasoning"] == THOUGHT
    assert reply["reasoning_ms"] == assistant(run).reasoning_ms
    (line,) = export_jsonl_lines([conversation])
    assert json.loads(line) == {
        "messages": [
            {"role": "user", "content": "Hi there"},
            {"role": "assistant", "content": "".join(ANSWER)},
        ]
    }
    assert "greets me" not in line
    assert "reasoning" not in line


def test_thoughts_are_coalesced_like_text_and_written_before_the_answer(redis_url):
    run_id = str(uuid.uuid4())
    writer = eventlog.EventWriter(run_id, coalesce_ms=3_600_000)
    for piece in ("Let ", "me ", "think."):
        writer.reasoning_delta("m1", piece)
    writer.message_delta("m1", "Yes.")
    writer.flush()

    assert [(e["type"], e["message_id"], e["delta"]) for e in eventlog.events_all(run_id)] == [
        (eventlog.REASONING_DELTA, "m1", "Let "),  # the first goes out at once
        (eventlog.REASONING_DELTA, "m1", "me think."),  # the rest as one write
        (eventlog.MESSAGE_DELTA, "m1", "Yes."),
    ]


def test_a_reply_cut_while_still_thinking_keeps_its_thoughts_but_sends_no_empty_turn(
    conversation, redis_url, enqueued, upstream
):
    # All of the reply's tokens went into thinking: the server stops it at the limit.
    upstream.push(Script(reasoning=THOUGHTS, finish_reason="length"), Script(text="Sorry."))

    run = reply_to(conversation)

    assert run.status == Run.Status.INCOMPLETE
    reply = assistant(run)
    assert (reply.content, reply.reasoning) == ("", THOUGHT)
    assert reply.provider_payload == {"system_fingerprint": "fp_fake", "finish_reason": "length"}

    reply_to(conversation, "Hello?")

    sent = upstream.requests[1].messages
    assert [m["role"] for m in sent] == ["user", "user"]
    assert "greets me" not in json.dumps(sent)


def test_the_servers_own_fields_are_stored_with_the_reply_within_bounds(
    conversation, redis_url, enqueued, upstream
):
    upstream.push(
        Script(
            text=ANSWER,
            chunk_fields={
                "*": {"provider": "Fireworks"},
                "text": {"rogue": "z" * 2_000_000},  # a hostile server's "metadata"
                "finish": {"timings": TIMINGS},
                "usage": {"system_fingerprint": "fp_last"},
            },
            choice_fields={"finish": {"stop_reason": None, "native_finish_reason": "eos"}},
        )
    )

    run = reply_to(conversation)

    assert assistant(run).provider_payload == {
        "provider": "Fireworks",
        "system_fingerprint": "fp_last",  # the fake's "fp_fake" until the last chunk
        "timings": TIMINGS,
        "choice": {"native_finish_reason": "eos"},
        "finish_reason": "stop",
    }


def test_stateless_chat_answers_a_reasoning_model_without_its_thoughts(owner, upstream):
    upstream.push(Script(reasoning=THOUGHTS, text=ANSWER), Script(text="Again."))

    first = stateless.stateless_chat(
        user=owner, state=None, system="", messages=[{"role": "user", "content": "Hi there"}]
    )
    stateless.stateless_chat(
        user=owner, state=first.state, system="", messages=[{"role": "user", "content": "More"}]
    )

    assert (first.reply, first.status) == ("".join(ANSWER), "completed")
    history = stateless.state_decode(first.state, provider="openai", user_id=owner.pk).messages
    assert "greets me" not in json.dumps(history)
    assert "greets me" not in json.dumps(upstream.requests[1].messages)
