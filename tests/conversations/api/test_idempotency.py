"""Idempotency-Key on POST: replay, in flight, a different body, per user, expiry."""

import base64
import threading
from datetime import timedelta

import pytest
from django.db import connection, connections
from django.utils import timezone
from rest_framework.test import APIClient

from accounts.models import ApiKey, IdempotencyRecord
from conversations.engine import stateless
from conversations.engine.llm.base import Finished, TextDelta
from conversations.models import Conversation, Message
from tests.support.api import error_of

pytestmark = pytest.mark.django_db


def create(client, key, title="Plans"):
    return client.post(
        "/api/v1/conversations/", {"title": title}, format="json", HTTP_IDEMPOTENCY_KEY=key
    )


def test_a_repeat_gets_the_stored_answer_and_creates_nothing(api, owner):
    first = create(api, "k-1")
    again = create(api, "k-1")
    assert first.status_code == again.status_code == 201
    assert again.json() == first.json()
    assert again["Idempotent-Replayed"] == "true"
    assert Conversation.objects.filter(owner=owner).count() == 1


def test_the_same_key_with_another_body_is_422(api, owner):
    create(api, "k-2")
    response = create(api, "k-2", title="Other")
    assert response.status_code == 422
    assert error_of(response)["code"] == "idempotency_key_reused"
    assert Conversation.objects.filter(owner=owner).count() == 1


@pytest.mark.django_db(transaction=True)
def test_a_repeat_while_the_first_is_in_flight_is_409(owner, as_user, conversation, monkeypatch):
    """The second request arrives while the first is inside the view: it gets 409."""
    from conversations.api.views import conversations as views

    entered, release = threading.Event(), threading.Event()
    real = views.services.context_event_add

    def slow(**kwargs):
        entered.set()
        release.wait(10)
        return real(**kwargs)

    monkeypatch.setattr(views.services, "context_event_add", slow)
    url = f"/api/v1/conversations/{conversation.pk}/events/"
    answers = {}

    def first():
        try:
            answers["first"] = as_user(owner).post(
                url, {"content": "hi"}, format="json", HTTP_IDEMPOTENCY_KEY="k-4"
            )
        finally:
            connections.close_all()

    thread = threading.Thread(target=first)
    thread.start()
    assert entered.wait(10)
    second = as_user(owner).post(url, {"content": "hi"}, format="json", HTTP_IDEMPOTENCY_KEY="k-4")
    release.set()
    thread.join(10)
    assert second.status_code == 409
    assert error_of(second)["code"] == "idempotency_in_flight"
    assert answers["first"].status_code == 201
    assert Message.objects.filter(conversation=conversation).count() == 1
    third = as_user(owner).post(url, {"content": "hi"}, format="json", HTTP_IDEMPOTENCY_KEY="k-4")
    assert third.status_code == 201
    assert third.json() == answers["first"].json()


def test_keys_are_per_user(api, as_user, outsider, owner):
    create(api, "shared")
    theirs = create(as_user(outsider), "shared")
    assert theirs.status_code == 201
    assert "Idempotent-Replayed" not in theirs
    assert Conversation.objects.filter(owner=outsider).count() == 1


def test_a_failed_request_frees_its_key(api, owner):
    refused = api.post(
        "/api/v1/conversations/", {"title": "x" * 300}, format="json", HTTP_IDEMPOTENCY_KEY="k-5"
    )
    assert refused.status_code == 400
    # The client fixes the body and retries with the same key.
    fixed = create(api, "k-5")
    assert fixed.status_code == 201


def test_keys_expire_after_24_hours(api, owner):
    create(api, "k-6")
    IdempotencyRecord.objects.update(created_at=timezone.now() - timedelta(hours=25))
    again = create(api, "k-6")
    assert again.status_code == 201
    assert "Idempotent-Replayed" not in again
    assert Conversation.objects.filter(owner=owner).count() == 2


def test_a_claim_abandoned_by_a_crashed_request_can_be_taken_over(api, owner):
    create(api, "k-7")
    IdempotencyRecord.objects.update(
        completed_at=None, created_at=timezone.now() - timedelta(minutes=10)
    )
    again = create(api, "k-7")
    assert again.status_code == 201
    assert "Idempotent-Replayed" not in again


def test_a_malformed_key_is_400(api):
    response = create(api, "x" * 300)
    assert response.status_code == 400
    assert "Idempotency-Key" in error_of(response)["message"]


def create_key(client, idempotency_key):
    return client.post(
        "/api/v1/api-keys/", {"name": "ci"}, format="json", HTTP_IDEMPOTENCY_KEY=idempotency_key
    )


def stored_text_everywhere() -> str:
    """Every row of every table, as text: where a secret must not be."""
    rows = []
    with connection.cursor() as cursor:
        for table in connection.introspection.table_names(cursor):
            cursor.execute(f"SELECT * FROM {connection.ops.quote_name(table)}")
            rows += [repr(row) for row in cursor.fetchall()]
    return "\n".join(rows)


def secret_parts(secret: str) -> list[str]:
    """The whole secret and its private part (after the public prefix)."""
    return [secret, secret.split("_", 2)[2]]


def test_an_api_key_secret_is_never_stored_and_a_replay_answers_without_it(api, owner):
    first = create_key(api, "key-1")
    assert first.status_code == 201
    secret = first.json()["key"]
    assert secret.startswith("prl_")
    assert "Idempotent-Withheld" not in first
    everything = stored_text_everywhere()
    assert IdempotencyRecord.objects.filter(key="key-1").exists()
    for part in secret_parts(secret):
        assert part not in everything
    again = create_key(api, "key-1")
    assert again.status_code == 201
    assert again["Idempotent-Replayed"] == "true"
    assert again["Idempotent-Withheld"] == "key"
    assert again.json() == {**first.json(), "key": None}
    assert ApiKey.objects.filter(owner=owner).count() == 1
    # The secret shown once still works; the replay did not make another.
    keyed = APIClient()
    keyed.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    assert keyed.get("/api/v1/conversations/").status_code == 200


def test_a_replay_after_the_key_was_revoked_answers_the_creation_without_the_secret(api, owner):
    first = create_key(api, "key-2").json()
    assert api.delete(f"/api/v1/api-keys/{first['id']}/").status_code == 204
    again = create_key(api, "key-2")
    assert again.status_code == 201
    assert again["Idempotent-Withheld"] == "key"
    assert again.json() == {**first, "key": None}
    for part in secret_parts(first["key"]):
        assert part not in again.content.decode()
        assert part not in stored_text_everywhere()
    assert ApiKey.objects.get(pk=first["id"]).revoked_at is not None


def test_a_key_made_with_a_password_stores_neither_secret_nor_password(owner):
    client = APIClient()
    client.credentials(
        HTTP_AUTHORIZATION="Basic " + base64.b64encode(b"alice:pw-alice-123").decode()
    )
    first = create_key(client, "key-3")
    assert first.status_code == 201
    everything = stored_text_everywhere()
    for part in [*secret_parts(first.json()["key"]), "pw-alice-123"]:
        assert part not in everything
    assert create_key(client, "key-3").json()["key"] is None


def test_another_user_with_the_same_idempotency_key_gets_a_key_of_their_own(api, as_user, outsider):
    mine = create_key(api, "shared").json()
    theirs = create_key(as_user(outsider), "shared")
    assert theirs.status_code == 201
    assert "Idempotent-Replayed" not in theirs
    assert theirs.json()["id"] != mine["id"]
    assert theirs.json()["key"] not in (None, mine["key"])
    assert ApiKey.objects.get(pk=theirs.json()["id"]).owner == outsider


class OneReply:
    name = "echo"

    def __init__(self) -> None:
        self.calls = 0

    async def stream(self, *, model, messages, tools, generation=None):
        self.calls += 1
        yield TextDelta("a private reply")
        yield Finished("stop")


def test_stateless_chat_keeps_nothing_for_a_repeat(api, monkeypatch):
    """Stateless chat stores nothing, the idempotency table included: a repeat is refused
    instead of answered, and the model is not called again."""
    provider = OneReply()
    monkeypatch.setattr(stateless, "provider_get", lambda: provider)
    body = {"messages": [{"role": "user", "content": "a private question"}]}
    url = "/api/v1/stateless/chat/"
    first = api.post(url, body, format="json", HTTP_IDEMPOTENCY_KEY="s-1")
    assert first.status_code == 200
    assert first.json()["reply"] == "a private reply"
    everything = stored_text_everywhere()
    for text in ("a private reply", "a private question", first.json()["state"]):
        assert text not in everything
    again = api.post(url, body, format="json", HTTP_IDEMPOTENCY_KEY="s-1")
    assert again.status_code == 409
    assert error_of(again)["code"] == "idempotency_answer_not_kept"
    assert provider.calls == 1
    # The same key with another body is still a client bug, and a new key works.
    other = {"messages": [{"role": "user", "content": "another"}]}
    assert api.post(url, other, format="json", HTTP_IDEMPOTENCY_KEY="s-1").status_code == 422
    assert api.post(url, body, format="json", HTTP_IDEMPOTENCY_KEY="s-2").status_code == 200
    assert provider.calls == 2


@pytest.mark.parametrize("deletion", ["api", "admin action"])
def test_answers_kept_for_repeats_go_with_the_deleted_conversation(api, owner, deletion):
    """A kept answer may quote the conversation (its title, a message): deleting the
    conversation, by any path, leaves none of it behind, and a repeat gets 410 instead of
    carrying the request out again."""
    created = create(api, "c-1", title="A private title").json()
    url = f"/api/v1/conversations/{created['id']}/messages/"
    sent = api.post(
        url, {"content": "a private message"}, format="json", HTTP_IDEMPOTENCY_KEY="m-1"
    )
    assert sent.status_code == 202
    other = create(api, "c-2", title="Another title")
    assert "A private title" in str(list(IdempotencyRecord.objects.values_list("body", flat=True)))
    if deletion == "api":
        assert api.delete(f"/api/v1/conversations/{created['id']}/").status_code == 204
    else:
        from conversations.services import governance

        governance.conversations_delete(
            actor=None, queryset=Conversation.objects.filter(pk=created["id"])
        )
    everything = stored_text_everywhere()
    assert "A private title" not in everything
    assert "a private message" not in everything
    again = create(api, "c-1", title="A private title")
    assert again.status_code == 410
    assert error_of(again)["code"] == "gone"
    assert not Conversation.objects.filter(owner=owner, title="A private title").exists()
    # Answers about other conversations are kept.
    assert create(api, "c-2", title="Another title").json() == other.json()
