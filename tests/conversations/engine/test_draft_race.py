"""The user's draft edit wins over the assistant's update_draft it raced with.

The worker runs in this process step by step (the fake OpenAI server plays the model), and
the user saves the draft the way a client does, over the websocket or the REST API, while
a model call is under way: after the model read the draft, before the tool it asks for runs.
"""

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from channels.testing import WebsocketCommunicator
from django.db import connections
from rest_framework.test import APIClient

from conversations import engine
from conversations.background_loop import loop_run
from conversations.engine import eventlog, provider_get
from conversations.models import Conversation, Message, Run
from tests.support.fake_openai import FakeOpenAI, Script
from tests.support.sockets import session_cookie
from tests.support.steps import run_to_end

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("redis_url")]

MODEL_TEXT = "Dear team, the launch moves to May."
USER_TEXT = "Dear team, the launch stays in April. Thanks for the hard work!"
NOTICE = f'[user edited the draft to: "{USER_TEXT}"]'

Edit = Callable[[Conversation, str], None]


@pytest.fixture
def model(settings, fake_openai: FakeOpenAI) -> Iterator[FakeOpenAI]:
    """The real OpenAI provider, talking to the fake server."""
    settings.OPENAI_API_KEY = "test-key"
    settings.OPENAI_BASE_URL = fake_openai.base_url
    settings.OPENAI_MAX_RETRIES = 0
    yield fake_openai
    # Its HTTP session lives on the loop replies stream on; closed there.
    loop_run(provider_get().aclose())  # type: ignore[attr-defined]


def rest_edit(conversation: Conversation, text: str) -> None:
    client = APIClient()
    client.force_login(conversation.owner)
    url = f"/api/v1/conversations/{conversation.pk}/draft/"
    response = client.put(url, {"draft": text}, format="json")
    assert response.status_code == 200, response.content


def socket_edit(conversation: Conversation, text: str) -> None:
    async def save() -> None:
        cookie = await sync_to_async(session_cookie)(conversation.owner)
        from config.asgi import application

        ws = WebsocketCommunicator(
            application,
            f"/ws/conversations/{conversation.pk}/",
            headers=[
                (b"origin", b"http://localhost:8000"),
                (b"host", b"localhost:8000"),
                (b"cookie", cookie),
            ],
        )
        connected, _ = await ws.connect()
        assert connected
        await ws.send_json_to({"type": "draft.update", "draft": text})
        # The save is done when the conversation's sockets hear of it.
        while (frame := await ws.receive_json_from(timeout=5))["type"] != (
            "conversation.draft_updated"
        ):
            assert frame["type"] != "error", frame
        assert (frame["draft"], frame["by"]) == (text, "user")
        await ws.disconnect()

    async_to_sync(save)()


TRANSPORTS = pytest.mark.parametrize("edit", [socket_edit, rest_edit], ids=["websocket", "rest"])


def while_the_model_works(edit: Edit, conversation: Conversation, text: str) -> Callable[..., None]:
    """A Script.on_chunk that saves the user's draft once the model call is under way (the
    request with the old draft was sent), before its reply, and so its tool calls, exist."""
    done: list[bool] = []

    def on_chunk(index: int, sent_at: float) -> None:
        if done:
            return
        done.append(True)
        try:
            edit(conversation, text)
        finally:
            connections.close_all()  # this thread's connection, before the test db goes

    return on_chunk


def update_draft(call_id: str, text: str, **options: Any) -> Script:
    """A model reply that asks for update_draft(text)."""
    return Script(tool_calls=[(call_id, "update_draft", json.dumps({"draft": text}))], **options)


def tool_results(run: Run) -> list[tuple[str, bool]]:
    rows = Message.objects.filter(run=run, role="tool").order_by("seq")
    return [(m.content, bool((m.provider_payload or {}).get("is_error"))) for m in rows]


def drafts_published(run: Run) -> list[str]:
    """What the open chat pages were told to show in the draft panel during the run."""
    return [e["draft"] for e in eventlog.events_all(str(run.pk)) if e["type"] == "draft.updated"]


def shown_draft(conversation: Conversation) -> str:
    client = APIClient()
    client.force_login(conversation.owner)
    return client.get(f"/api/v1/conversations/{conversation.pk}/").json()["draft"]


def next_turn_input(conversation: Conversation, model: FakeOpenAI, enqueued: list[str]):
    model.push(Script(text="Noted."))
    _, run = engine.run_start(conversation=conversation, content="Is it ready to send?")
    run_to_end(run, enqueued)
    return model.requests[-1].messages


@TRANSPORTS
def test_an_edit_saved_before_the_tool_runs_is_kept_and_the_model_is_told(
    conversation, model, enqueued, edit
):
    model.push(
        update_draft(
            "call_1", MODEL_TEXT, on_chunk=while_the_model_works(edit, conversation, USER_TEXT)
        ),
        Script(text="You changed it meanwhile, so I left your version."),
    )
    _, run = engine.run_start(
        conversation=conversation, content=f"update the draft to: {MODEL_TEXT}"
    )

    run = run_to_end(run, enqueued)

    assert run.status == Run.Status.COMPLETED
    # The user's words are what the panel shows, and no page was told otherwise.
    assert shown_draft(conversation) == USER_TEXT
    assert drafts_published(run) == []
    # The tool failed, quoting the user's draft, and the model read that in the same run.
    [(output, is_error)] = tool_results(run)
    assert is_error
    assert output.startswith("update_draft failed: the user edited the draft")
    assert output.endswith(f'The draft now reads: "{USER_TEXT}"')
    assert output in [m.get("content") for m in model.requests[1].messages]

    # The edit is still news for the model: the next turn tells it.
    sent = next_turn_input(conversation, model, enqueued)
    assert {"role": "system", "content": NOTICE} in sent
    assert conversation.messages.filter(kind="draft_edit", content=NOTICE).count() == 1


@TRANSPORTS
def test_an_edit_saved_after_the_tool_ran_is_not_overwritten_later_in_the_run(
    conversation, model, enqueued, edit
):
    polished = MODEL_TEXT + " Best, Ana"
    model.push(
        update_draft("call_1", MODEL_TEXT),
        # The model's next call reads the draft it just wrote; the user saves while it
        # works, and the reply then asks to polish the text it believes is there.
        update_draft(
            "call_2", polished, on_chunk=while_the_model_works(edit, conversation, USER_TEXT)
        ),
        Script(text="Done."),
    )
    _, run = engine.run_start(
        conversation=conversation, content=f"update the draft to: {MODEL_TEXT}"
    )

    run = run_to_end(run, enqueued)

    assert run.status == Run.Status.COMPLETED
    assert shown_draft(conversation) == USER_TEXT
    # Pages showed the assistant's first text, then the user's save; never the polish.
    assert drafts_published(run) == [MODEL_TEXT]
    (_, first_failed), (second, second_failed) = tool_results(run)
    assert not first_failed
    assert second_failed
    assert second.endswith(f'The draft now reads: "{USER_TEXT}"')

    sent = next_turn_input(conversation, model, enqueued)
    assert {"role": "system", "content": NOTICE} in sent


def test_the_model_may_rewrite_the_draft_once_it_has_read_the_users_version(
    conversation, model, enqueued
):
    merged = USER_TEXT + " The team dinner is on Friday."
    model.push(
        update_draft(
            "call_1", MODEL_TEXT, on_chunk=while_the_model_works(rest_edit, conversation, USER_TEXT)
        ),
        # Having read the user's draft in the tool error, the model writes deliberately.
        update_draft("call_2", merged),
        Script(text="I kept your wording and added the dinner."),
    )
    _, run = engine.run_start(conversation=conversation, content="Add the dinner to the draft")

    run = run_to_end(run, enqueued)

    assert shown_draft(conversation) == merged
    assert drafts_published(run) == [merged]
    assert [failed for _, failed in tool_results(run)] == [True, False]
    # The model answered the edit itself, so the next turn has no stale notice.
    sent = next_turn_input(conversation, model, enqueued)
    assert not any(str(m.get("content")).startswith("[user edited") for m in sent)
    assert not conversation.messages.filter(kind="draft_edit").exists()
    assert {"role": "system", "content": f'[current draft: "{merged}"]'} in sent
