"""The conversation's `vision` setting: whether its model takes images. Shown, changed
only to a boolean, and carried by export and import."""

import json

import pytest

from conversations import services
from conversations.models import Conversation
from tests.support.api import error_of

pytestmark = pytest.mark.django_db


def test_on_by_default_and_changed_by_patch(api, conversation):
    url = f"/api/v1/conversations/{conversation.pk}/"
    assert api.get(url).json()["vision"] is True

    response = api.patch(url, {"vision": False}, format="json")

    assert response.status_code == 200, response.content
    assert response.json()["vision"] is False
    assert Conversation.objects.get(pk=conversation.pk).vision is False


@pytest.mark.parametrize("value", ["no", 0, None], ids=["string", "number", "null"])
def test_only_a_boolean_is_taken(api, conversation, value):
    url = f"/api/v1/conversations/{conversation.pk}/"
    response = api.patch(url, {"vision": value}, format="json")

    assert response.status_code == 400
    assert "vision" in json.dumps(error_of(response))
    assert Conversation.objects.get(pk=conversation.pk).vision is True


def test_created_with_it_off(api):
    response = api.post("/api/v1/conversations/", {"vision": False}, format="json")
    assert response.status_code == 201, response.content
    assert response.json()["vision"] is False


def test_another_users_conversation_cannot_be_changed(as_user, outsider, conversation):
    response = as_user(outsider).patch(
        f"/api/v1/conversations/{conversation.pk}/", {"vision": False}, format="json"
    )
    assert response.status_code == 404
    assert Conversation.objects.get(pk=conversation.pk).vision is True


def test_export_and_import_carry_it(api, owner):
    conversation = services.conversation_create(owner=owner, title="Text only", vision=False)
    services.user_message_append(conversation=conversation, content="Hello")
    document = api.get(f"/api/v1/conversations/{conversation.pk}/export/?format=json")
    body = b"".join(document.streaming_content)
    assert json.loads(body)["conversation"]["vision"] is False

    imported = api.post("/api/v1/conversations/import/", body, content_type="application/json")

    assert imported.status_code == 201, imported.content
    assert Conversation.objects.get(pk=imported.json()["id"]).vision is False
