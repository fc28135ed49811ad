"""A reasoning model's thoughts as `reasoning` items, an assistant turn's `phase`, and the
token breakdowns of usage: in a response's output, in its stream, on the conversation's
items, and taken back as input."""

import openai
import pytest

from conversations.models import Conversation, Message
from tests.support.fake_openai import Script
from tests.support.openai_api import body_of, sse_events

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("worker")]

USAGE = {
    "prompt_tokens": 40,
    "completion_tokens": 12,
    "total_tokens": 52,
    "prompt_tokens_details": {"cached_tokens": 32},
    "completion_tokens_details": {"reasoning_tokens": 7},
}


def test_a_reasoning_reply_shows_its_thoughts_before_its_answer(client, model):
    model.push(Script(reasoning="Two and two make four.", text="Four.", usage=USAGE))
    response = client.responses.create(model="m", input="What is 2 + 2?")
    raw = client.responses.with_raw_response.retrieve(response.id).http_response.json()
    reasoning, message = raw["output"]
    assert reasoning["type"] == "reasoning"
    assert reasoning["id"].startswith("rs_")
    assert reasoning["content"] == [{"type": "reasoning_text", "text": "Two and two make four."}]
    assert message["content"][0]["text"] == "Four."
    # The upstream's breakdown of the tokens reaches the client.
    assert raw["usage"]["input_tokens_details"]["cached_tokens"] == 32
    assert raw["usage"]["output_tokens_details"]["reasoning_tokens"] == 7
    assert raw["completed_at"] >= raw["created_at"]
    assert response.output_text == "Four."


def test_a_streamed_reasoning_reply_streams_its_thoughts(client, model):
    model.push(Script(reasoning="Let me think.", text="Done."))
    with client.responses.with_streaming_response.create(
        model="m", input="Think first.", stream=True
    ) as answer:
        events = sse_events(answer.iter_lines())
    thoughts = "".join(e["delta"] for e in events if e["type"] == "response.reasoning.delta")
    assert thoughts == "Let me think."
    (done,) = [e for e in events if e["type"] == "response.reasoning.done"]
    assert done["text"] == "Let me think."
    final = events[-1]["response"]
    assert [item["type"] for item in final["output"]] == ["reasoning", "message"]
    # The stream's items are the ones a later retrieve gives.
    stored = client.responses.with_raw_response.retrieve(final["id"]).http_response.json()
    assert stored["output"] == final["output"]


def test_the_conversations_items_show_reasoning_and_it_can_be_removed(client, model, owner):
    conversation = client.conversations.create()
    model.push(Script(reasoning="Hmm.", text="Hello."))
    client.responses.create(model="m", input="Hi", conversation=conversation.id)
    items = client.conversations.items.list(conversation.id, order="asc").data
    assert [item.type for item in items] == ["message", "reasoning", "message"]
    reasoning = items[1]
    assert client.conversations.items.retrieve(reasoning.id, conversation_id=conversation.id)
    client.conversations.items.delete(reasoning.id, conversation_id=conversation.id)
    after = client.conversations.items.list(conversation.id, order="asc").data
    assert [item.type for item in after] == ["message", "message"]
    # The path shown now holds the reply without its thoughts (the edit made a new one).
    stored = Conversation.objects.get(owner=owner)
    reply = Message.objects.get(branch=stored.active_branch_id, seq=2)
    assert (reply.content, reply.reasoning) == ("Hello.", "")
    assert after[1].content[0].text == "Hello."


def test_reasoning_and_phase_sent_as_input_are_kept_with_their_turn(client, model, owner):
    conversation = client.conversations.create(
        items=[
            {"type": "message", "role": "user", "content": "Plan a trip."},
            {
                "type": "reasoning",
                "id": "rs_elsewhere",
                "summary": [{"type": "summary_text", "text": "A short plan first."}],
                "encrypted_content": "opaque-from-another-server",
            },
            {
                "type": "message",
                "role": "assistant",
                "content": "First, the dates.",
                "phase": "commentary",
            },
            {"type": "function_call", "call_id": "c1", "name": "dates", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "May"},
            {
                "type": "message",
                "role": "assistant",
                "content": "Go in May.",
                "phase": "final_answer",
            },
        ]
    )
    stored = Conversation.objects.get(owner=owner)
    turn = stored.messages.get(seq=2)
    assert (turn.content, turn.reasoning) == ("First, the dates.", "A short plan first.")
    assert [call["name"] for call in turn.tool_calls] == ["dates"]
    items = client.conversations.items.list(conversation.id, order="asc").data
    kinds = [(item.type, getattr(item, "phase", None)) for item in items]
    assert kinds == [
        ("message", None),
        ("reasoning", None),
        ("message", "commentary"),
        ("function_call", None),
        ("function_call_output", None),
        ("message", "final_answer"),
    ]
    # The model reads the turns, never the thoughts.
    model.push(Script(text="Enjoy."))
    client.responses.create(model="m", input="Thanks", conversation=conversation.id)
    sent = str(model.requests[-1].body["messages"])
    assert "First, the dates." in sent
    assert "A short plan first." not in sent


@pytest.mark.parametrize(
    ("item", "param"),
    [
        ({"role": "assistant", "content": "x", "phase": "draft"}, "items[0].phase"),
        ({"role": "user", "content": "x", "phase": "commentary"}, "items[0].phase"),
        ({"type": "reasoning"}, "items[0].summary"),
        ({"type": "reasoning", "summary": "text"}, "items[0].summary"),
        (
            {"type": "reasoning", "summary": [{"type": "image", "text": "x"}]},
            "items[0].summary[0].type",
        ),
        (
            {"type": "reasoning", "summary": [{"type": "summary_text", "text": 3}]},
            "items[0].summary[0].text",
        ),
        ({"type": "reasoning", "summary": [], "colour": "red"}, "items[0].colour"),
    ],
)
def test_bad_reasoning_and_phase_name_their_parameter(client, owner, item, param):
    conversation = client.conversations.create()
    with pytest.raises(openai.BadRequestError) as caught:
        client.conversations.items.create(conversation.id, items=[item])
    assert body_of(caught.value)["param"] == param
    assert not Message.objects.filter(conversation__owner=owner).exists()


def test_thoughts_with_no_turn_after_them_are_kept(client, owner):
    conversation = client.conversations.create()
    client.conversations.items.create(
        conversation.id,
        items=[
            {"type": "reasoning", "summary": [{"type": "summary_text", "text": "Alone."}]},
            {"role": "user", "content": "Next."},
        ],
    )
    first, second = Message.objects.filter(conversation__owner=owner).order_by("seq")
    assert (first.role, first.content, first.reasoning) == ("assistant", "", "Alone.")
    assert second.content == "Next."


def test_an_unsaid_temperature_echoes_the_one_the_model_used(client, model, owner, settings):
    settings.PARLEY_DEFAULT_TEMPERATURE = 0.7
    model.push(Script(text="One."), Script(text="Two."))
    first = client.responses.create(model="m", input="Hi")
    assert (first.temperature, first.top_p) == (0.7, 1.0)
    assert model.requests[-1].body["temperature"] == 0.7
    # A conversation's own temperature wins over the server's, in the echo as upstream.
    conversation = Conversation.objects.get(owner=owner)
    conversation.temperature = 0.2
    conversation.save(update_fields=["temperature"])
    second = client.responses.create(model="m", input="Again", previous_response_id=first.id)
    assert second.temperature == 0.2
    assert model.requests[-1].body["temperature"] == 0.2
    assert client.responses.retrieve(second.id).temperature == 0.2
