"""The SDK against a real HTTP server (pytest-django's live server), with its default
retries on: a business conflict is not retried, and the web UI's REST API sees what the
SDK wrote."""

import openai
import pytest

from conversations.models import Conversation, Run
from tests.support.openai_api import key_for

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def live_client(live_server, owner) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{live_server.url}/openai/v1", api_key=key_for(owner))


def test_a_conversation_over_http(live_client, live_server, owner):
    created = live_client.conversations.create(
        metadata={"via": "sdk"}, items=[{"role": "user", "content": "hello over HTTP"}]
    )
    live_client.conversations.items.create(
        created.id, items=[{"role": "assistant", "content": "hello back"}]
    )
    items = list(live_client.conversations.items.list(created.id, order="asc", limit=1))
    assert [item.content[0].text for item in items] == ["hello over HTTP", "hello back"]
    # The same conversation over Parley's own REST API, as the web UI reads it.
    import httpx2 as httpx

    stored = Conversation.objects.get(owner=owner)
    rest = httpx.get(
        f"{live_server.url}/api/v1/conversations/{stored.pk}/messages/",
        headers={"Authorization": f"Bearer {key_for(owner)}"},
    ).json()
    assert [m["content"] for m in rest["results"]] == ["hello over HTTP", "hello back"]
    assert live_client.conversations.delete(created.id).deleted is True


def test_conflicts_are_not_retried(live_client, owner):
    created = live_client.conversations.create()
    Run.objects.create(conversation=Conversation.objects.get(owner=owner), status=Run.Status.QUEUED)
    retrying = live_client.with_options(max_retries=3)
    with pytest.raises(openai.BadRequestError) as caught:
        retrying.conversations.items.create(
            created.id, items=[{"role": "user", "content": "while a reply runs"}]
        )
    assert caught.value.code == "conversation_locked"
    assert caught.value.response.headers["x-should-retry"] == "false"
    with pytest.raises(openai.NotFoundError):
        retrying.conversations.retrieve("conv_" + "f" * 32)
