"""A function_call_output answers a function_call made before it, in the same request or
on the conversation's path, that has no answer yet: the rule an import keeps. Refused in
OpenAI's error shape, named by the item's parameter, with nothing stored."""

import json

import openai
import pytest

from conversations import services
from conversations.errors import ValidationFailed
from conversations.formats import exporting
from conversations.models import Branch, Conversation, Message, Run
from tests.support.fake_openai import Script
from tests.support.openai_api import body_of

pytestmark = pytest.mark.django_db


def user(text: str) -> dict[str, str]:
    return {"type": "message", "role": "user", "content": text}


def call(call_id: str, name: str = "weather") -> dict[str, str]:
    return {"type": "function_call", "call_id": call_id, "name": name, "arguments": "{}"}


def output(call_id: str, text: str = "sunny") -> dict[str, str]:
    return {"type": "function_call_output", "call_id": call_id, "output": text}


def counts() -> tuple[int, int, int, int]:
    return (
        Conversation.objects.count(),
        Branch.objects.count(),
        Message.objects.count(),
        Run.objects.count(),
    )


def refused(caught: pytest.ExceptionInfo[openai.BadRequestError], param: str, call_id: str):
    error = body_of(caught.value)
    assert caught.value.status_code == 400
    assert (error["type"], error["code"], error["param"]) == (
        "invalid_request_error",
        "invalid_value",
        param,
    )
    assert repr(call_id) in error["message"]
    assert param in error["message"]
    return error


def test_an_output_answering_no_call_is_refused_and_nothing_stored(client):
    conversation = client.conversations.create(items=[user("hi")])
    before = counts()
    with pytest.raises(openai.BadRequestError) as caught:
        client.conversations.items.create(
            conversation.id, items=[user("weather?"), call("c1"), output("c1"), output("c9")]
        )
    error = refused(caught, "items[3].call_id", "c9")
    assert "answers no earlier unanswered tool call" in error["message"]
    assert counts() == before


def test_a_new_conversation_with_an_unpaired_output_is_not_created(client, owner):
    before = counts()
    with pytest.raises(openai.BadRequestError) as caught:
        client.conversations.create(items=[user("hi"), output("nobody")])
    refused(caught, "items[1].call_id", "nobody")
    assert counts() == before
    assert not Conversation.objects.filter(owner=owner).exists()


def test_an_output_may_answer_a_call_stored_by_an_earlier_request(client, owner):
    conversation = client.conversations.create(items=[user("weather?"), call("c1"), call("c2")])
    client.conversations.items.create(conversation.id, items=[output("c2", "rain")])
    client.conversations.items.create(conversation.id, items=[user("and?"), output("c1")])
    stored = Conversation.objects.get(owner=owner)
    assert [(m.role, m.tool_call_id) for m in stored.messages.order_by("seq")] == [
        ("user", ""),
        ("assistant", ""),
        ("tool", "c2"),
        ("user", ""),
        ("tool", "c1"),
    ]


def test_an_output_answered_twice_is_refused_as_import_refuses_it(client):
    conversation = client.conversations.create(items=[user("weather?"), call("c1")])
    with pytest.raises(openai.BadRequestError) as caught:
        client.conversations.items.create(conversation.id, items=[output("c1"), output("c1")])
    refused(caught, "items[1].call_id", "c1")
    client.conversations.items.create(conversation.id, items=[output("c1")])
    before = counts()
    with pytest.raises(openai.BadRequestError) as caught:
        client.conversations.items.create(conversation.id, items=[output("c1", "again")])
    refused(caught, "items[0].call_id", "c1")
    assert counts() == before
    # Once answered, the id may name a new call, as an import allows.
    client.conversations.items.create(conversation.id, items=[call("c1"), output("c1")])


def test_a_call_id_still_waiting_for_its_answer_cannot_be_reused(client):
    conversation = client.conversations.create(items=[user("weather?"), call("c1")])
    before = counts()
    with pytest.raises(openai.BadRequestError) as caught:
        client.conversations.items.create(conversation.id, items=[user("again"), call("c1")])
    error = refused(caught, "items[1].call_id", "c1")
    assert "already an unanswered call" in error["message"]
    assert counts() == before


def test_an_output_answering_another_conversations_call_is_refused(client):
    other = client.conversations.create(items=[user("weather?"), call("c1")])
    mine = client.conversations.create(items=[user("hello")])
    before = counts()
    with pytest.raises(openai.BadRequestError) as caught:
        client.conversations.items.create(mine.id, items=[output("c1")])
    refused(caught, "items[0].call_id", "c1")
    assert counts() == before
    client.conversations.items.create(other.id, items=[output("c1")])


def test_an_output_answering_a_call_of_another_branch_is_refused(client, owner):
    conversation = client.conversations.create(items=[user("a"), call("c1"), user("b")])
    items = list(client.conversations.items.list(conversation.id, order="asc"))
    # Taking out "a" forks the path; the call is copied onto the new one, so still open.
    client.conversations.items.delete(items[0].id, conversation_id=conversation.id)
    stored = Conversation.objects.get(owner=owner)
    root = Branch.objects.get(conversation=stored, parent__isnull=True)
    services.branch_switch(conversation=stored, branch_id=root.pk)
    # Back on the root, a branch made without the call: its output answers nothing there.
    client.conversations.items.delete(items[1].id, conversation_id=conversation.id)
    before = counts()
    with pytest.raises(openai.BadRequestError) as caught:
        client.conversations.items.create(conversation.id, items=[output("c1")])
    refused(caught, "items[0].call_id", "c1")
    assert counts() == before


def test_a_call_cannot_be_taken_out_before_its_output(client, owner):
    conversation = client.conversations.create(
        items=[user("weather?"), call("c1"), output("c1"), user("thanks")]
    )
    items = list(client.conversations.items.list(conversation.id, order="asc"))
    before = counts()
    with pytest.raises(openai.BadRequestError) as caught:
        client.conversations.items.delete(items[1].id, conversation_id=conversation.id)
    error = body_of(caught.value)
    assert "'c1' answers no earlier unanswered tool call" in error["message"]
    assert "take that one out first" in error["message"]
    assert error["message"].startswith("Invalid request: ")
    assert counts() == before
    # The output first, then its call: each path keeps the rule, and it exports and
    # imports back.
    client.conversations.items.delete(items[2].id, conversation_id=conversation.id)
    left = list(client.conversations.items.list(conversation.id, order="asc"))
    client.conversations.items.delete(left[1].id, conversation_id=conversation.id)
    assert [i.type for i in client.conversations.items.list(conversation.id, order="asc")] == [
        "message",
        "message",
    ]
    stored = Conversation.objects.get(owner=owner)
    services.conversation_import(owner=owner, document=json.dumps(exporting.export_json(stored)))


# --- responses: the same rule on `input` ---------------------------------------------------


def test_a_response_input_with_an_unpaired_output_is_refused(client, owner):
    before = counts()
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(
            model="m", input=[user("weather?"), call("c1"), output("c1"), output("c2")]
        )
    refused(caught, "input[3].call_id", "c2")
    assert counts() == before
    # Kept nowhere: the same rule, before any model call.
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(model="m", input=[output("c2")], store=False)
    refused(caught, "input[0].call_id", "c2")
    assert counts() == before


def test_a_response_in_a_conversation_answers_only_its_open_calls(client, owner):
    conversation = client.conversations.create(items=[user("weather?"), call("c1")])
    other = client.conversations.create(items=[user("time?"), call("t1")])
    before = counts()
    for items, param, call_id in (
        ([output("t1")], "input[0].call_id", "t1"),
        ([output("c1"), output("c1")], "input[1].call_id", "c1"),
        ([user("hm"), call("c1")], "input[1].call_id", "c1"),
    ):
        with pytest.raises(openai.BadRequestError) as caught:
            client.responses.create(model="m", conversation=conversation.id, input=items)
        refused(caught, param, call_id)
        with pytest.raises(openai.BadRequestError) as caught:
            client.responses.create(
                model="m", conversation=conversation.id, input=items, store=False
            )
        refused(caught, param, call_id)
    assert counts() == before
    assert other.id != conversation.id


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("worker")
def test_a_response_after_a_previous_one_answers_its_calls_once(client, model):
    weather = {"type": "function", "name": "get_weather", "parameters": {"type": "object"}}
    model.push(
        Script(tool_calls=[("call_w", "get_weather", "{}")]),
        Script(text="Sunny."),
    )
    first = client.responses.create(model="m", input="Weather?", tools=[weather])
    before = counts()
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(
            model="m", previous_response_id=first.id, input=[output("call_x")], tools=[weather]
        )
    refused(caught, "input[0].call_id", "call_x")
    assert counts() == before
    second = client.responses.create(
        model="m", previous_response_id=first.id, input=[output("call_w")], tools=[weather]
    )
    assert second.output_text == "Sunny."
    before = counts()
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(
            model="m", previous_response_id=second.id, input=[output("call_w")], tools=[weather]
        )
    refused(caught, "input[0].call_id", "call_w")
    assert counts() == before


def test_the_domain_refuses_an_unpaired_result_whoever_calls_it(conversation):
    """The services hold the rule themselves: a caller that skips the door's reading
    still cannot store what an import would refuse."""
    with pytest.raises(ValidationFailed) as caught:
        services.message_batch_append(
            conversation=conversation,
            messages=[services.NewMessage(role="tool", tool_call_id="x", content="1")],
        )
    assert [p.path for p in caught.value.problems] == ["$.messages[0].tool_call_id"]
    assert not conversation.messages.exists()
