"""Conversations over /openai/v1/ with the official SDK: create (with items), retrieve,
update, delete; ordinary Parley conversations underneath."""

import uuid

import openai
import pytest
from openai.types import Model
from openai.types.conversations import (
    Conversation as SDKConversation,
)
from openai.types.conversations import (
    ConversationDeletedResource,
    ConversationItemList,
)

from conversations import selectors
from conversations.models import Conversation, Message
from tests.support.openai_api import body_of
from tests.support.sdk_types import assert_sdk_shape

pytestmark = pytest.mark.django_db


def test_create_with_items_stores_an_ordinary_parley_conversation(client, owner):
    created = client.conversations.create(
        metadata={"topic": "cats"},
        items=[
            {"type": "message", "role": "developer", "content": "Answer briefly."},
            {"type": "message", "role": "user", "content": "How many legs has a cat?"},
            {"role": "assistant", "content": [{"type": "output_text", "text": "Four."}]},
        ],
    )
    assert created.object == "conversation"
    assert created.id.startswith("conv_")
    assert created.metadata == {"topic": "cats"}
    stored = Conversation.objects.get(owner=owner)
    assert created.id == f"conv_{stored.pk.hex}"
    assert created.created_at == int(stored.created_at.timestamp())
    # What the web UI, export and search read: plain messages on the active path, in order.
    assert stored.title == "How many legs has a cat?"
    page = selectors.message_page(conversation=stored)
    assert [(m.seq, m.role, m.kind, m.content) for m in page.items] == [
        (1, "system", "event", "Answer briefly."),
        (2, "user", "message", "How many legs has a cat?"),
        (3, "assistant", "message", "Four."),
    ]


def test_retrieve_update_and_delete(client, owner):
    created = client.conversations.create()
    assert created.metadata == {}
    again = client.conversations.retrieve(created.id)
    assert again == created
    updated = client.conversations.update(created.id, metadata={"a": "1", "b": "2"})
    assert updated.metadata == {"a": "1", "b": "2"}
    # Replaced as a whole, and null clears it.
    assert client.conversations.update(created.id, metadata={"b": "3"}).metadata == {"b": "3"}
    assert client.conversations.update(created.id, metadata=None).metadata == {}
    deleted = client.conversations.delete(created.id)
    assert (deleted.id, deleted.deleted, deleted.object) == (
        created.id,
        True,
        "conversation.deleted",
    )
    assert not Conversation.objects.filter(owner=owner).exists()
    with pytest.raises(openai.NotFoundError):
        client.conversations.retrieve(created.id)


def test_a_conversation_made_elsewhere_answers_to_its_parley_id_too(client, conversation):
    by_uuid = client.conversations.retrieve(str(conversation.pk))
    assert by_uuid.id == f"conv_{conversation.pk.hex}"
    assert client.conversations.retrieve(by_uuid.id) == by_uuid


def test_models_lists_the_configured_model(client, settings):
    settings.PARLEY_MODEL = "parley-test-model"
    models = list(client.models.list())
    assert [m.id for m in models] == ["parley-test-model"]
    assert client.models.retrieve("parley-test-model").owned_by == "parley"
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("gpt-nonexistent")


def test_every_object_has_each_field_the_sdk_declares_required(client, raw, settings):
    created = raw.post(
        "/conversations",
        json={
            "metadata": {"k": "v"},
            "items": [
                {"role": "system", "content": "Be kind."},
                {"role": "user", "content": [{"type": "input_text", "text": "2+2?"}]},
                {"type": "function_call", "call_id": "c1", "name": "calculator", "arguments": "{}"},
                {"type": "function_call", "call_id": "c2", "name": "current_time", "arguments": ""},
                {"type": "function_call_output", "call_id": "c1", "output": "4"},
                {"type": "function_call_output", "call_id": "c2", "output": "noon"},
                {"role": "assistant", "content": "4, at noon."},
            ],
        },
    ).json()
    assert_sdk_shape(SDKConversation, created)
    conversation = created["id"]
    assert_sdk_shape(SDKConversation, raw.get(f"/conversations/{conversation}").json())
    assert_sdk_shape(
        SDKConversation,
        raw.post(f"/conversations/{conversation}", json={"metadata": {"x": "y"}}).json(),
    )
    listed = raw.get(f"/conversations/{conversation}/items", params={"order": "asc"}).json()
    assert_sdk_shape(ConversationItemList, listed)
    assert [item["type"] for item in listed["data"]] == [
        "message",
        "message",
        "function_call",
        "function_call",
        "function_call_output",
        "function_call_output",
        "message",
    ]
    added = raw.post(
        f"/conversations/{conversation}/items",
        json={"items": [{"role": "user", "content": "thanks"}]},
    ).json()
    assert_sdk_shape(ConversationItemList, added)
    empty = raw.get(f"/conversations/{conversation}/items", params={"after": added["last_id"]})
    assert_sdk_shape(ConversationItemList, empty.json())
    for item in listed["data"]:
        one = raw.get(f"/conversations/{conversation}/items/{item['id']}").json()
        assert one == item
    after_delete = raw.delete(f"/conversations/{conversation}/items/{added['first_id']}").json()
    assert_sdk_shape(SDKConversation, after_delete)
    models = raw.get("/models").json()
    assert models["object"] == "list"
    for model in models["data"]:
        assert_sdk_shape(Model, model)
        assert_sdk_shape(Model, raw.get(f"/models/{model['id']}").json())
    assert_sdk_shape(
        ConversationDeletedResource, raw.delete(f"/conversations/{conversation}").json()
    )


def test_a_refused_item_leaves_no_conversation_behind(client, owner):
    with pytest.raises(openai.BadRequestError) as caught:
        client.conversations.create(
            items=[
                {"role": "user", "content": "fine"},
                {"role": "user", "content": [{"type": "input_image", "image_url": "x"}]},
            ]
        )
    assert body_of(caught.value)["param"] == "items[1].content[0].image_url"
    assert not Conversation.objects.filter(owner=owner).exists()
    assert not Message.objects.exists()


def test_ids_are_checked_before_any_lookup(client):
    for bad in ("conv_nothex", "conv_" + "0" * 31, "nope", str(uuid.uuid4()), "conv_" + "a" * 32):
        with pytest.raises(openai.NotFoundError):
            client.conversations.retrieve(bad)
