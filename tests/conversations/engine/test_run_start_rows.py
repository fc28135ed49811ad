"""A run's start writes and reads its rows with SQL written once (conversations/sql, by
the row reader of accounts/sql/rows.py) instead of the ORM's per-call compiling: what it
stores and the instances it hands back must be exactly the ORM's, on PostgreSQL and
SQLite alike."""

import dataclasses
import uuid

import pytest
from django.db import IntegrityError, connection
from django.db.models import Model
from django.test.utils import CaptureQueriesContext

from accounts.sql import Rows, execute, row_update
from conversations import engine, services
from conversations.models import Branch, Conversation, Message, Run, UsageDay
from conversations.services import NewMessage

pytestmark = pytest.mark.usefixtures("redis_url", "enqueued")


def statements_of(captured: CaptureQueriesContext) -> list[str]:
    return [q["sql"] for q in captured if not q["sql"].startswith(("BEGIN", "COMMIT"))]


def fields_of(instance: Model, model: type[Model]) -> dict[str, object]:
    return {f.attname: getattr(instance, f.attname) for f in model._meta.concrete_fields}


@pytest.mark.django_db(transaction=True)
def test_what_a_start_hands_back_is_what_the_database_holds(owner):
    conversation = services.conversation_create(owner=owner)
    services.conversation_draft_update(conversation=conversation, draft="A plan")
    message, run = engine.run_start(conversation=conversation, content="Plan a trip")

    assert fields_of(message, Message) == fields_of(Message.objects.get(pk=message.pk), Message)
    assert fields_of(run, Run) == fields_of(Run.objects.get(pk=run.pk), Run)
    assert not message._state.adding
    assert not run._state.adding
    # Linked as `create(conversation=..., trigger_message=...)` left them.
    assert run.conversation is conversation
    assert run.trigger_message is message
    assert message.run is run
    stored = Conversation.objects.get(pk=conversation.pk)
    assert (stored.title, stored.message_count, stored.draft_edited) == ("Plan a trip", 2, False)
    assert (conversation.title, conversation.message_count) == ("Plan a trip", 2)
    assert conversation.last_activity_at == stored.last_activity_at
    # The start counts in the usage rollup, in the same transaction: the notice and the
    # user's message.
    day = UsageDay.objects.get(conversation_id=conversation.pk)
    assert (day.owner_id, day.messages, day.user_messages) == (owner.pk, 2, 1)


@pytest.mark.django_db(transaction=True)
def test_rows_read_as_the_orm_reads_them(owner):
    conversation = services.conversation_create(owner=owner, title="Cats")
    services.branch_fork(
        conversation=conversation,
        source=Branch.objects.get(conversation=conversation, parent__isnull=True),
        fork_seq=0,
    )
    branches = Rows(Branch)
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {branches.columns('b')} FROM {branches.table} b "
            f"WHERE b.{connection.ops.quote_name('conversation_id')} = %s",
            [Conversation._meta.pk.get_db_prep_value(conversation.pk, connection)],
        )
        read = [branches.read(row) for row in cursor.fetchall()]
    assert sorted((fields_of(b, Branch) for b in read), key=str) == sorted(
        (fields_of(b, Branch) for b in Branch.objects.filter(conversation=conversation)), key=str
    )
    assert all(isinstance(b.id, uuid.UUID) and isinstance(b.lineage, list) for b in read)

    # Some fields: the rest is deferred, loaded when asked for.
    some = Rows(Conversation, ("title", "id", "draft_edited"))
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {some.columns()} FROM {some.table}")
        (partial,) = [some.read(row) for row in cursor.fetchall()]
    assert (partial.pk, partial.title, partial.draft_edited) == (conversation.pk, "Cats", False)
    assert partial.get_deferred_fields() >= {"owner_id", "message_count"}
    assert partial.branch_count == 2


def test_a_new_message_takes_every_field_it_names():
    # `_insert` hands NewMessage's fields to Message by name: none may be lost (the files
    # a message carries are linked beside its row).
    names = {field.name for field in dataclasses.fields(NewMessage)}
    assert names - NewMessage.BESIDES_ROW <= set(Rows(Message).attnames)


@pytest.mark.django_db(transaction=True)
def test_a_write_refused_among_others_stores_none_of_them(owner):
    conversation = services.conversation_create(owner=owner)
    services.user_message_append(conversation=conversation, content="first")
    # The branch's counter put back: the next message takes a seq already stored.
    Branch.objects.filter(conversation=conversation).update(message_count=0)
    with pytest.raises(IntegrityError):
        services.user_message_append(conversation=conversation, content="second")
    stored = Conversation.objects.get(pk=conversation.pk)
    assert stored.message_count == 1
    assert list(stored.messages.values_list("content", flat=True)) == ["first"]
    assert UsageDay.objects.get(conversation_id=conversation.pk).messages == 1


@pytest.mark.django_db
def test_plain_values_only_are_written_by_hand(owner):
    from django.db.models import F

    conversation = services.conversation_create(owner=owner)
    with pytest.raises(AssertionError):
        row_update(Conversation, conversation.pk, {"message_count": F("message_count") + 1})
    execute(row_update(Conversation, conversation.pk, {"title": "Set", "message_count": 3}))
    conversation.refresh_from_db()
    assert (conversation.title, conversation.message_count) == ("Set", 3)


@pytest.mark.django_db(transaction=True)
def test_chat_into_a_conversation_reads_it_with_the_lock(owner):
    conversation = services.conversation_create(owner=owner, title="Kept")
    with CaptureQueriesContext(connection) as captured:
        continued, message, run = engine.chat_start(
            user=owner, message="Hello", conversation_id=str(conversation.pk)
        )
    # No read of the conversation before its start: the lock checks the owner.
    assert len(statements_of(captured)) == (4 if connection.vendor == "postgresql" else 6)
    assert continued.pk == conversation.pk
    assert run.conversation_id == conversation.pk
    assert message.content == "Hello"
    assert continued.message_count == 1
    # What the start did not read loads when asked for, as it is stored.
    assert (continued.title, continued.owner_id) == ("Kept", owner.pk)


@pytest.mark.django_db(transaction=True)
def test_chat_into_someone_elses_conversation_is_not_found(owner, outsider):
    theirs = services.conversation_create(owner=outsider)
    for key in (theirs.pk, uuid.uuid4(), "not-a-uuid"):
        with pytest.raises(Conversation.DoesNotExist):
            engine.chat_start(user=owner, message="Hello", conversation_id=key)
    assert not Message.objects.filter(conversation=theirs).exists()
    assert not Run.objects.filter(conversation=theirs).exists()
    assert Conversation.objects.get(pk=theirs.pk).message_count == 0
