"""`POST chat/`: the first call creates a conversation and returns its id; the
next call with that id continues it, and the model sees the history."""

from collections.abc import AsyncGenerator
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.db import connection
from django.utils import timezone

from conversations.api.views import chat as chat_views
from conversations.engine import dispatch, eventlog, runner
from conversations.engine.llm.base import Finished, StreamEvent, TextDelta
from conversations.models import Conversation, Message, Run
from tests.support.api import error_of
from tests.support.steps import steps_in_threads

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("redis_url")]


class RecordingProvider:
    name = "recording"

    def __init__(self) -> None:
        self.calls: list[list[dict[str, Any]]] = []

    async def stream(
        self,
        *,
        model: str,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        generation: Any = None,
    ) -> AsyncGenerator[StreamEvent, None]:
        self.calls.append(messages)
        last = messages[-1]["content"]
        yield TextDelta(f"You said: {last}")
        yield Finished("stop")


@pytest.fixture
def provider(monkeypatch) -> RecordingProvider:
    recorder = RecordingProvider()
    monkeypatch.setattr(runner, "provider_get", lambda: recorder)
    return recorder


@pytest.fixture
def worker(monkeypatch) -> None:
    """Run each enqueued step in a thread of this process, as a Celery worker would."""
    steps_in_threads(monkeypatch)


def test_two_calls_make_one_conversation_and_the_model_sees_the_history(
    api, owner, provider, worker, settings
):
    settings.PARLEY_CHAT_WAIT_SECONDS = 20
    first = api.post("/api/v1/chat/", {"message": "My name is Ada."}, format="json")
    assert first.status_code == 200, first.content
    body = first.json()
    assert body["status"] == "completed"
    assert body["reply"] == "You said: My name is Ada."
    conversation_id = body["conversation_id"]
    assert Conversation.objects.get(pk=conversation_id).owner == owner

    second = api.post(
        "/api/v1/chat/",
        {"message": "What is my name?", "conversation_id": conversation_id},
        format="json",
    )
    assert second.status_code == 200
    assert second.json()["conversation_id"] == conversation_id
    sent = [(m["role"], m["content"]) for m in provider.calls[-1]]
    assert sent == [
        ("user", "My name is Ada."),
        ("assistant", "You said: My name is Ada."),
        ("user", "What is my name?"),
    ]
    assert Conversation.objects.filter(owner=owner).count() == 1
    assert Message.objects.filter(conversation_id=conversation_id).count() == 4


def test_past_the_wait_it_answers_202_with_the_run_to_follow(api, monkeypatch, settings):
    settings.PARLEY_CHAT_WAIT_SECONDS = 1
    monkeypatch.setattr(dispatch, "step_enqueue", lambda run_id: None)  # no worker picks it up
    response = api.post("/api/v1/chat/", {"message": "Hello"}, format="json")
    assert response.status_code == 202
    body = response.json()
    assert body["reply"] is None
    assert body["status"] == "queued"
    assert body["run"]["id"] == body["run_id"]
    assert body["events_url"].endswith(f"/api/v1/runs/{body['run_id']}/events/")
    assert Run.objects.get(pk=body["run_id"]).status == "queued"


def test_past_the_wait_the_run_is_answered_as_it_is_now(api, monkeypatch, settings):
    settings.PARLEY_CHAT_WAIT_SECONDS = 1

    def taken_but_slow(run_id, countdown=0):
        # A worker took the run at once, and the reply takes longer than the wait.
        Run.objects.filter(pk=run_id).update(status="in_progress", started_at=timezone.now())

    monkeypatch.setattr(dispatch, "step_enqueue", taken_but_slow)
    response = api.post("/api/v1/chat/", {"message": "Hello"}, format="json")
    assert response.status_code == 202
    body = response.json()
    assert body["status"] == "in_progress"
    assert body["run"]["status"] == "in_progress"
    assert body["run"]["started_at"] is not None


def test_no_database_connection_is_held_while_waiting(api, monkeypatch, settings):
    settings.PARLEY_CHAT_WAIT_SECONDS = 1
    monkeypatch.setattr(dispatch, "step_enqueue", lambda run_id: None)
    seen = {}
    real_follow = eventlog.run_follow

    async def follow(run_id, **kwargs):
        # Looked at from the request's own database thread, where its connection lives.
        seen["open"] = await sync_to_async(lambda: connection.connection is not None)()
        async for event in real_follow(run_id, **kwargs):
            yield event

    monkeypatch.setattr(chat_views.eventlog, "run_follow", follow)
    assert api.post("/api/v1/chat/", {"message": "Hi"}, format="json").status_code == 202
    assert seen == {"open": False}


def test_another_users_conversation_is_404_and_nothing_is_stored(
    as_user, outsider, conversation, monkeypatch
):
    monkeypatch.setattr(dispatch, "step_enqueue", lambda run_id: None)
    response = as_user(outsider).post(
        "/api/v1/chat/",
        {"message": "Hi", "conversation_id": str(conversation.pk)},
        format="json",
    )
    assert response.status_code == 404
    assert error_of(response)["code"] == "not_found"
    assert not Message.objects.exists()
    assert not Conversation.objects.filter(owner=outsider).exists()


def test_a_refused_message_leaves_no_empty_conversation(api, owner):
    response = api.post("/api/v1/chat/", {"message": "   "}, format="json")
    assert response.status_code == 400
    assert error_of(response)["details"]["problems"][0]["path"] == "$.message"
    assert not Conversation.objects.filter(owner=owner).exists()


def test_a_replayed_chat_starts_no_second_run(api, owner, provider, worker, settings):
    settings.PARLEY_CHAT_WAIT_SECONDS = 20
    first = api.post("/api/v1/chat/", {"message": "Once"}, format="json", HTTP_IDEMPOTENCY_KEY="c1")
    again = api.post("/api/v1/chat/", {"message": "Once"}, format="json", HTTP_IDEMPOTENCY_KEY="c1")
    assert first.status_code == again.status_code == 200
    assert again.json() == first.json()
    assert again["Idempotent-Replayed"] == "true"
    assert Run.objects.count() == 1
