"""Idempotency-Key on POST: replay, in flight, a different body, per user, expiry."""

import threading
from datetime import timedelta

import pytest
from django.db import connections
from django.utils import timezone

from accounts.models import ApiKey, IdempotencyRecord
from conversations.models import Conversation, Message
from tests.api.conftest import error_of

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


def test_an_api_key_secret_is_never_stored_and_a_replay_answers_without_it(api, owner):
    first = create_key(api, "key-1")
    assert first.status_code == 201
    secret = first.json()["key"]
    assert secret.startswith("prl_")
    # Nothing kept for the replay holds the secret, nor any part past the public prefix.
    for record in IdempotencyRecord.objects.all():
        assert secret not in str(record.body)
        assert secret[len(first.json()["prefix"]) :] not in str(record.body)
    again = create_key(api, "key-1")
    assert again.status_code == 201
    assert again["Idempotent-Replayed"] == "true"
    assert again.json() == {**first.json(), "key": None}
    assert ApiKey.objects.filter(owner=owner).count() == 1


def test_a_replay_after_the_key_was_revoked_still_holds_no_secret(api, owner):
    first = create_key(api, "key-2").json()
    assert api.delete(f"/api/v1/api-keys/{first['id']}/").status_code == 204
    again = create_key(api, "key-2")
    assert again.json()["key"] is None
    assert first["key"] not in again.content.decode()
