"""Starting a run is paid on every message sent, so it is kept cheap: a fixed handful of
statements, whatever the conversation's length, and one channel-layer message that
carries everything the other tabs need, which each socket relays as the frames it always
sent."""

import uuid
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from django.db import connection
from django.test.utils import CaptureQueriesContext

from conversations import engine, notifications, services
from conversations.errors import RunActive
from conversations.models import Branch, Conversation, Message, Run
from tests.support.sockets import (
    connect_as,
    receive_until,
)

pytestmark = pytest.mark.usefixtures("redis_url", "enqueued", "close_thread_connections")


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, dict[str, Any]]]:
    """What the channel layer is asked to send, by group."""
    layer = get_channel_layer()
    messages: list[tuple[str, dict[str, Any]]] = []
    group_send = layer.group_send

    async def recorded(group: str, message: dict[str, Any]) -> None:
        messages.append((group, message))
        await group_send(group, message)

    monkeypatch.setattr(layer, "group_send", recorded)
    return messages


@pytest.mark.django_db(transaction=True)
def test_a_run_starts_in_a_few_statements_whatever_the_conversations_length(owner):
    conversation = services.conversation_create(owner=owner)
    for number in range(3):
        with CaptureQueriesContext(connection) as captured:
            _, run = engine.run_start(
                conversation=conversation, content=f"question {number}", client_id=f"c-{number}"
            )
        # The lock with both checks, the branch's counter moved and read, the message, the
        # usage rollup, the conversation's counters (and title), the run; and the
        # transaction around them. PostgreSQL takes the message, the rollup and the
        # counters as one statement.
        statements = [q["sql"] for q in captured if not q["sql"].startswith(("BEGIN", "COMMIT"))]
        assert len(statements) == (4 if connection.vendor == "postgresql" else 6), statements
        Run.objects.filter(pk=run.pk).update(status=Run.Status.COMPLETED)
    conversation.refresh_from_db()
    assert conversation.message_count == 3
    assert Branch.objects.get(conversation=conversation, parent__isnull=True).message_count == 3
    seqs = list(conversation.messages.order_by("seq").values_list("seq", flat=True))
    assert seqs == [1, 2, 3]


@pytest.mark.django_db(transaction=True)
def test_one_notification_carries_the_title_the_notice_the_message_and_the_run(
    owner, sent, django_capture_on_commit_callbacks
):
    conversation = services.conversation_create(owner=owner)
    services.conversation_draft_update(conversation=conversation, draft="A plan")
    sent.clear()
    with django_capture_on_commit_callbacks(execute=True):
        message, run = engine.run_start(conversation=conversation, content="Plan a trip")

    assert len(sent) == 1
    group, carried = sent[0]
    assert group == notifications.group_name(conversation.pk)
    bodies = notifications.notification_bodies(carried)
    assert [body["type"] for body in bodies] == [
        notifications.UPDATED,
        notifications.MESSAGE_STORED,
        notifications.MESSAGE_STORED,
        notifications.RUN_STARTED,
    ]
    assert bodies[0]["title"] == "Plan a trip"
    notice, stored = bodies[1]["message"], bodies[2]["message"]
    assert (notice["kind"], notice["seq"]) == ("draft_edit", 1)
    assert (stored["id"], stored["seq"]) == (str(message.pk), 2)
    # The message is stored pointing at its run: nothing to update after the run exists.
    assert stored["run_id"] == str(run.pk) == bodies[3]["run"]["id"]
    assert Message.objects.get(pk=message.pk).run_id == run.pk
    # A socket of a release that reads `body` only still follows the new run.
    assert carried["body"] == bodies[-1]


@pytest.mark.django_db(transaction=True)
def test_a_refused_start_announces_nothing(owner, sent, django_capture_on_commit_callbacks):
    conversation = services.conversation_create(owner=owner)
    with django_capture_on_commit_callbacks(execute=True):
        engine.run_start(conversation=conversation, content="first")
    sent.clear()
    with django_capture_on_commit_callbacks(execute=True), pytest.raises(RunActive):
        engine.run_start(conversation=conversation, content="second")
    assert sent == []
    assert conversation.messages.count() == 1


@pytest.mark.django_db(transaction=True)
def test_a_repeat_while_its_run_is_still_active_answers_that_run(owner):
    conversation = services.conversation_create(owner=owner)
    message, run = engine.run_start(conversation=conversation, content="Once", client_id="c-1")
    again, repeated = engine.run_start(conversation=conversation, content="Once", client_id="c-1")
    assert (again.pk, repeated.pk) == (message.pk, run.pk)
    assert conversation.messages.count() == 1
    with pytest.raises(RunActive):
        engine.run_start(conversation=conversation, content="Twice", client_id="c-2")


@pytest.mark.django_db(transaction=True)
def test_another_conversations_branch_stores_nothing(owner):
    conversation = services.conversation_create(owner=owner)
    other = services.conversation_create(owner=owner)
    with pytest.raises(Branch.DoesNotExist):
        engine.run_start(conversation=conversation, content="Hi", branch_id=other.active_branch_id)
    with pytest.raises(Branch.DoesNotExist):
        engine.run_start(conversation=conversation, content="Hi", branch_id=uuid.uuid4())
    assert not Message.objects.filter(conversation__in=[conversation, other]).exists()
    assert not Run.objects.filter(conversation__in=[conversation, other]).exists()
    assert Branch.objects.get(conversation=other, parent__isnull=True).message_count == 0


@pytest.mark.django_db(transaction=True)
def test_a_stale_copy_of_the_conversation_starts_the_run_with_current_settings(owner):
    # A socket holds its copy from the moment it connected; the model, title and counters
    # that changed since are read again under the lock.
    conversation = services.conversation_create(owner=owner)
    stale = Conversation.objects.get(pk=conversation.pk)
    services.conversation_update(conversation=conversation, model="gpt-other", title="Named")
    engine.run_start(conversation=conversation, content="one")
    Run.objects.filter(conversation=conversation).update(status=Run.Status.COMPLETED)

    _, run = engine.run_start(conversation=stale, content="two")
    assert run.model == "gpt-other"
    conversation.refresh_from_db()
    assert (conversation.title, conversation.message_count) == ("Named", 2)


@pytest.mark.django_db(transaction=True)
async def test_the_other_socket_hears_the_start_as_the_frames_it_always_did(owner):
    conversation = await sync_to_async(services.conversation_create)(owner=owner)
    first = await connect_as(owner, conversation.pk)
    second = await connect_as(owner, conversation.pk)

    await first.send_json_to({"type": "message.create", "content": "Hello there"})
    frames = await receive_until(second, "run.created")
    kinds = [frame["type"] for frame in frames]
    assert kinds[:3] == [
        notifications.UPDATED,
        notifications.MESSAGE_STORED,
        notifications.RUN_STARTED,
    ]
    assert frames[0]["title"] == "Hello there"
    assert frames[1]["message"]["content"] == "Hello there"
    # It follows the run the notification named, from its first event.
    assert frames[-1]["run_id"] == frames[2]["run"]["id"]
    assert frames[-1]["sequence_number"] == 0
    await first.disconnect()
    await second.disconnect()
