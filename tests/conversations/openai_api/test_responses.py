"""Responses through the official SDK, in this process: a response is a run, driven by
worker threads against the fake upstream, and its answer is OpenAI's Response object."""

import json

import openai
import pytest
from openai.types.responses import Response

from conversations.models import Conversation, Message, Run
from tests.support.fake_openai import Script
from tests.support.sdk_types import assert_sdk_shape

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("worker")]


def raw_response(client: openai.OpenAI, response_id: str) -> dict:
    return client.responses.with_raw_response.retrieve(response_id).http_response.json()


def test_a_response_in_a_new_conversation_is_stored_and_complete(client, model, owner):
    model.push(Script(text="Hello there, Ada."))
    response = client.responses.create(
        model="parley-test",
        input="Hi, I am Ada.",
        instructions="Answer briefly.",
        metadata={"via": "sdk"},
        temperature=0.5,
        top_p=0.9,
        max_output_tokens=300,
    )
    assert response.status == "completed"
    assert response.output_text == "Hello there, Ada."
    assert response.id.startswith("resp_")
    assert response.metadata == {"via": "sdk"}
    assert response.instructions == "Answer briefly."
    assert response.usage is not None
    assert response.usage.total_tokens > 0
    assert response.conversation is None
    assert_sdk_shape(Response, raw_response(client, response.id))
    # The instructions went first to the model, and nothing of them was stored.
    sent = model.requests[-1].body
    assert sent["messages"][0] == {"role": "system", "content": "Answer briefly."}
    assert sent["temperature"] == 0.5
    assert sent["top_p"] == 0.9
    assert sent["max_completion_tokens"] == 300
    conversation = Conversation.objects.get(owner=owner)
    stored = list(conversation.messages.order_by("seq").values_list("role", "content"))
    assert stored == [("user", "Hi, I am Ada."), ("assistant", "Hello there, Ada.")]
    run = Run.objects.get(conversation=conversation)
    assert run.usage["total_tokens"] == response.usage.total_tokens
    assert client.responses.retrieve(response.id).output_text == "Hello there, Ada."


def test_a_conversation_continues_and_its_items_show_the_turns(client, model):
    conversation = client.conversations.create(
        items=[{"role": "user", "content": "My cat is Tom."}]
    )
    model.push(Script(text="Noted."), Script(text="Your cat is Tom."))
    client.responses.create(model="m", input="Remember that.", conversation=conversation.id)
    second = client.responses.create(
        model="m", input="What is my cat called?", conversation={"id": conversation.id}
    )
    assert second.output_text == "Your cat is Tom."
    assert second.conversation is not None
    assert second.conversation.id == conversation.id
    sent = [m["content"] for m in model.requests[-1].body["messages"]]
    assert sent == [
        "My cat is Tom.",
        "Remember that.",
        "Noted.",
        "What is my cat called?",
    ]
    items = list(client.conversations.items.list(conversation.id, order="asc"))
    assert [item.type for item in items] == ["message"] * 5
    inputs = list(client.responses.input_items.list(second.id))
    assert [item.content[0].text for item in inputs] == ["What is my cat called?"]


def test_a_server_tool_runs_inside_the_response(client, model):
    model.push(
        Script(tool_calls=[("call_1", "calculator", '{"expression": "6 * 7"}')]),
        Script(text="It is 42."),
    )
    response = client.responses.create(model="m", input="What is 6 * 7?")
    assert response.status == "completed"
    kinds = [item.type for item in response.output]
    assert kinds == ["function_call", "function_call_output", "message"]
    assert response.output[1].output == "42"
    assert response.output_text == "It is 42."
    assert_sdk_shape(Response, raw_response(client, response.id))


def test_a_client_tool_round_trip(client, model):
    weather = {
        "type": "function",
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    }
    model.push(
        Script(tool_calls=[("call_w", "get_weather", '{"city": "Paris"}')]),
        Script(text="Sunny in Paris."),
    )
    first = client.responses.create(
        model="m", input="Weather in Paris?", tools=[weather], tool_choice="auto"
    )
    assert first.status == "completed"
    [call] = first.output
    assert (call.type, call.name, call.call_id) == ("function_call", "get_weather", "call_w")
    assert json.loads(call.arguments) == {"city": "Paris"}
    sent = model.requests[-1].body
    assert "get_weather" in [tool["function"]["name"] for tool in sent["tools"]]
    assert sent["tool_choice"] == "auto"
    # Never run here: the call waits for the client's answer.
    assert not Message.objects.filter(role=Message.Role.TOOL).exists()
    second = client.responses.create(
        model="m",
        previous_response_id=first.id,
        input=[{"type": "function_call_output", "call_id": "call_w", "output": "sunny, 24C"}],
        tools=[weather],
    )
    assert second.output_text == "Sunny in Paris."
    assert second.previous_response_id == first.id
    messages = model.requests[-1].body["messages"]
    assert messages[-1] == {"role": "tool", "tool_call_id": "call_w", "content": "sunny, 24C"}
    assert_sdk_shape(Response, raw_response(client, second.id))


def test_continuing_an_older_response_forks_a_branch(client, model, owner):
    model.push(Script(text="One."), Script(text="Two."), Script(text="Other two."))
    first = client.responses.create(model="m", input="Count.")
    client.responses.create(model="m", input="Go on.", previous_response_id=first.id)
    third = client.responses.create(model="m", input="Go on again.", previous_response_id=first.id)
    assert third.output_text == "Other two."
    sent = [m["content"] for m in model.requests[-1].body["messages"]]
    assert sent == ["Count.", "One.", "Go on again."]
    conversation = Conversation.objects.get(owner=owner)
    assert conversation.branch_count == 2


def test_store_false_keeps_nothing(client, model, owner):
    model.push(
        Script(tool_calls=[("c1", "calculator", '{"expression": "2 + 2"}')]),
        Script(text="Four."),
    )
    before = (Conversation.objects.count(), Message.objects.count(), Run.objects.count())
    response = client.responses.create(model="m", input="2 + 2?", store=False)
    assert response.output_text == "Four."
    assert response.store is False
    assert [item.type for item in response.output] == [
        "function_call",
        "function_call_output",
        "message",
    ]
    assert (Conversation.objects.count(), Message.objects.count(), Run.objects.count()) == before
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(response.id)


def test_delete_takes_the_response_away_and_keeps_the_conversation(client, model, owner):
    model.push(Script(text="Kept."))
    response = client.responses.create(model="m", input="Hello")
    client.responses.delete(response.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(response.id)
    assert Message.objects.filter(conversation__owner=owner).count() == 2


def test_another_users_responses_are_not_found_everywhere(client, sdk, model, outsider):
    model.push(Script(text="Mine."))
    response = client.responses.create(model="m", input="Hello")
    other = sdk(outsider)
    calls = [
        lambda: other.responses.retrieve(response.id),
        lambda: other.responses.cancel(response.id),
        lambda: other.responses.delete(response.id),
        lambda: list(other.responses.input_items.list(response.id)),
        lambda: other.responses.create(model="m", input="x", previous_response_id=response.id),
        lambda: other.responses.retrieve("resp_" + "0" * 32),
        lambda: other.responses.retrieve("not-an-id"),
    ]
    for call in calls:
        with pytest.raises(openai.NotFoundError):
            call()
