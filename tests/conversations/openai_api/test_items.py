"""Items over /openai/v1/ with the official SDK: pages along the active path, each item
of a multi-call assistant message with its own id, and removal by a fork."""

import openai
import pytest

from conversations import selectors, services
from conversations.models import Branch, Conversation, Message, Run

pytestmark = pytest.mark.django_db


def user(text: str) -> dict[str, str]:
    return {"type": "message", "role": "user", "content": text}


def texts(items) -> list[str]:
    return [item.content[0].text for item in items]


@pytest.fixture
def numbered(client):
    """A conversation of 45 user messages, "m0" to "m44", added in three batches."""
    created = client.conversations.create(items=[user(f"m{n}") for n in range(20)])
    client.conversations.items.create(created.id, items=[user(f"m{n}") for n in range(20, 40)])
    client.conversations.items.create(created.id, items=[user(f"m{n}") for n in range(40, 45)])
    return created.id


def test_the_sdk_iterator_pages_through_every_item_newest_first_by_default(client, numbered):
    first = client.conversations.items.list(numbered, limit=7)
    assert texts(first.data) == [f"m{n}" for n in range(44, 37, -1)]
    assert first.has_more is True
    assert first.last_id == first.data[-1].id
    every = list(client.conversations.items.list(numbered, limit=7))
    assert texts(every) == [f"m{n}" for n in range(44, -1, -1)]
    assert len({item.id for item in every}) == 45


def test_ascending_pages_and_after(client, numbered):
    every = list(client.conversations.items.list(numbered, limit=10, order="asc"))
    assert texts(every) == [f"m{n}" for n in range(45)]
    tenth = every[9].id
    after = client.conversations.items.list(numbered, after=tenth, limit=3, order="asc")
    assert texts(after.data) == ["m10", "m11", "m12"]
    before = client.conversations.items.list(numbered, after=tenth, limit=3, order="desc")
    assert texts(before.data) == ["m8", "m7", "m6"]
    tail = client.conversations.items.list(numbered, after=every[-2].id, order="asc")
    assert (texts(tail.data), tail.has_more) == (["m44"], False)
    head = client.conversations.items.list(numbered, after=every[0].id)
    assert (head.data, head.has_more, head.first_id, head.last_id) == ([], False, "", "")
    # Default page size: 20.
    assert len(client.conversations.items.list(numbered, order="asc").data) == 20


def test_an_assistant_message_with_several_calls_gives_an_item_per_call(client):
    conversation = client.conversations.create()
    added = client.conversations.items.create(
        conversation.id,
        items=[
            user("weather in Paris and Rome?"),
            {"role": "assistant", "content": "Checking both."},
            {"type": "function_call", "call_id": "p", "name": "weather", "arguments": '{"c":"P"}'},
            {"type": "function_call", "call_id": "r", "name": "weather", "arguments": '{"c":"R"}'},
            {"type": "function_call_output", "call_id": "p", "output": "sunny"},
            {"type": "function_call_output", "call_id": "r", "output": "rain", "name": "weather"},
        ],
    )
    assert [item.type for item in added.data] == [
        "message",
        "message",
        "function_call",
        "function_call",
        "function_call_output",
        "function_call_output",
    ]
    # Stored as a model's reply with parallel calls is: one assistant message.
    stored = Message.objects.get(role="assistant")
    assert stored.content == "Checking both."
    assert [call["id"] for call in stored.tool_calls] == ["p", "r"]
    assert added.data[1].id == f"msg_{stored.pk.hex}"
    assert [added.data[2].id, added.data[3].id] == [
        f"fc_{stored.pk.hex}_0",
        f"fc_{stored.pk.hex}_1",
    ]
    assert added.data[5].name == "weather"
    for item in added.data:
        assert client.conversations.items.retrieve(item.id, conversation_id=conversation.id) == item
    listed = list(client.conversations.items.list(conversation.id, limit=1, order="asc"))
    assert [item.id for item in listed] == [item.id for item in added.data]
    # A cursor inside the message: the page goes on from the call after it.
    page = client.conversations.items.list(conversation.id, after=added.data[2].id, order="asc")
    assert [item.id for item in page.data] == [item.id for item in added.data[3:]]
    page = client.conversations.items.list(conversation.id, after=added.data[3].id, limit=2)
    assert [item.id for item in page.data] == [added.data[2].id, added.data[1].id]


def test_deleting_an_item_forks_the_path_without_it(client, owner):
    conversation = client.conversations.create(
        items=[
            user("one"),
            {"role": "assistant", "content": "calling"},
            {"type": "function_call", "call_id": "a", "name": "f", "arguments": "{}"},
            {"type": "function_call", "call_id": "b", "name": "g", "arguments": "{}"},
            user("two"),
        ]
    )
    items = list(client.conversations.items.list(conversation.id, order="asc"))
    answer = client.conversations.items.delete(items[2].id, conversation_id=conversation.id)
    assert (answer.id, answer.object) == (conversation.id, "conversation")
    left = list(client.conversations.items.list(conversation.id, order="asc"))
    assert [i.type for i in left] == ["message", "message", "function_call", "message"]
    assert left[2].call_id == "b"
    # Stored messages never change: the old path is still there, as an alternative.
    stored = Conversation.objects.get(owner=owner)
    assert stored.branch_count == 2
    old = Branch.objects.get(conversation=stored, parent__isnull=True)
    assert stored.active_branch_id != old.pk
    assert [
        len(m.tool_calls) for m in selectors.message_page(conversation=stored, branch=old).items
    ] == [0, 2, 0]
    # Items that were copied answer with their new ids; the taken-out one is gone.
    with pytest.raises(openai.NotFoundError):
        client.conversations.items.retrieve(items[2].id, conversation_id=conversation.id)
    assert left[0].id == items[0].id
    assert texts([left[3]]) == ["two"]
    # Taking out the text leaves the call; the last call and the text: the whole message.
    client.conversations.items.delete(left[1].id, conversation_id=conversation.id)
    left = list(client.conversations.items.list(conversation.id, order="asc"))
    assert [i.type for i in left] == ["message", "function_call", "message"]
    client.conversations.items.delete(left[1].id, conversation_id=conversation.id)
    left = list(client.conversations.items.list(conversation.id, order="asc"))
    assert texts(left) == ["one", "two"]
    stored.refresh_from_db()
    assert [m.seq for m in selectors.message_page(conversation=stored).items] == [1, 2]
    client.conversations.items.delete(left[1].id, conversation_id=conversation.id)
    assert texts(client.conversations.items.list(conversation.id)) == ["one"]


def test_items_wait_for_a_reply_being_generated_but_context_events_do_not(client, owner):
    conversation = client.conversations.create(items=[user("hi")])
    stored = Conversation.objects.get(owner=owner)
    Run.objects.create(conversation=stored, status=Run.Status.IN_PROGRESS)
    for items in (
        [user("again")],
        [{"type": "function_call_output", "call_id": "x", "output": ""}],
    ):
        with pytest.raises(openai.BadRequestError) as caught:
            client.conversations.items.create(conversation.id, items=items)
        assert caught.value.code == "conversation_locked"
        assert caught.value.response.headers["x-should-retry"] == "false"
    first = client.conversations.items.list(conversation.id).data[0]
    with pytest.raises(openai.BadRequestError) as caught:
        client.conversations.items.delete(first.id, conversation_id=conversation.id)
    assert caught.value.code == "conversation_locked"
    added = client.conversations.items.create(
        conversation.id, items=[{"role": "developer", "content": "The user is on a phone."}]
    )
    # Kept as a context event the model reads as system text, and shown back as sent.
    assert added.data[0].role == "developer"
    event = Message.objects.get(conversation=stored, seq=2)
    assert (event.role, event.kind) == ("system", "event")
    assert Message.objects.filter(conversation=stored).count() == 2


def test_items_follow_the_branch_the_conversation_shows(client, owner):
    conversation = client.conversations.create(items=[user("a"), user("b"), user("c")])
    before = list(client.conversations.items.list(conversation.id, order="asc"))
    client.conversations.items.delete(before[1].id, conversation_id=conversation.id)
    assert texts(client.conversations.items.list(conversation.id, order="asc")) == ["a", "c"]
    # Switching back (as the web UI's alternatives do) shows the old items, with their old ids.
    stored = Conversation.objects.get(owner=owner)
    root = Branch.objects.get(conversation=stored, parent__isnull=True)
    services.branch_switch(conversation=stored, branch_id=root.pk)
    again = list(client.conversations.items.list(conversation.id, order="asc"))
    assert [item.id for item in again] == [item.id for item in before]
