"""Writes: validation, seq allocation, counters, constraints, delete."""

from datetime import timedelta

import pytest
from django.db import IntegrityError, connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from accounts.models import User
from conversations import services
from conversations.errors import DraftEditedMeanwhile, ValidationFailed
from conversations.models import Branch, Conversation, Message, Run
from conversations.services import NewMessage
from tests.support.conversations import BUILTIN_TOOLS


def problems_of(excinfo) -> dict[str, str]:
    return {p.path: p.message for p in excinfo.value.problems}


@pytest.mark.django_db
def test_new_conversation_has_all_builtin_tools_and_no_messages(owner):
    conversation = services.conversation_create(owner=owner, title="  Trip plans  ")
    assert conversation.title == "Trip plans"
    assert conversation.tools == list(BUILTIN_TOOLS)
    assert conversation.message_count == 0


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("fields", "path"),
    [
        ({"title": "t" * 201}, "$.title"),
        ({"tools": ["calculator", "rm_rf"]}, "$.tools[1]"),
        ({"tools": ["calculator", "calculator"]}, "$.tools[1]"),
        ({"metadata": {f"k{i}": "v" for i in range(17)}}, "$.metadata"),
        ({"metadata": {"k": "v" * 513}}, "$.metadata.k"),
        ({"metadata": {"k": 5}}, "$.metadata.k"),
        ({"system_prompt": "nul \x00 byte"}, "$.system_prompt"),
    ],
    ids=["long-title", "unknown-tool", "tool-twice", "17-keys", "long-value", "non-string", "nul"],
)
def test_create_refuses_bad_settings_and_stores_nothing(owner, fields, path):
    with pytest.raises(ValidationFailed) as excinfo:
        services.conversation_create(owner=owner, **fields)
    assert path in problems_of(excinfo)
    assert not Conversation.objects.exists()


@pytest.mark.django_db
def test_metadata_at_the_limits_is_accepted(owner):
    metadata = {("k" * 62 + f"{i:02d}"): "v" * 512 for i in range(16)}
    conversation = services.conversation_create(owner=owner, metadata=metadata)
    conversation.refresh_from_db()
    assert conversation.metadata == metadata


@pytest.mark.django_db
def test_update_changes_only_what_was_passed(conversation):
    before = conversation.updated_at
    services.conversation_update(conversation=conversation, model="gpt-test", archived=True)
    conversation.refresh_from_db()
    assert conversation.model == "gpt-test"
    assert conversation.title == "Cats"
    assert conversation.archived_at is not None
    assert conversation.updated_at > before

    services.conversation_update(conversation=conversation, archived=False)
    conversation.refresh_from_db()
    assert conversation.archived_at is None


@pytest.mark.django_db
def test_update_with_one_bad_field_changes_nothing(conversation):
    with pytest.raises(ValidationFailed) as excinfo:
        services.conversation_update(conversation=conversation, title="New", tools=["nope"])
    assert "$.tools[0]" in problems_of(excinfo)
    conversation.refresh_from_db()
    assert conversation.title == "Cats"


@pytest.mark.django_db
def test_append_numbers_messages_and_moves_counters(conversation):
    first_activity = conversation.last_activity_at
    rows = services.messages_append(
        conversation=conversation,
        messages=[NewMessage(role="user", content="a"), NewMessage(role="assistant", content="b")],
    )
    third = services.message_append(
        conversation=conversation, message=NewMessage(role="user", content="c")
    )
    assert [r.seq for r in rows] + [third.seq] == [1, 2, 3]
    conversation.refresh_from_db()
    assert conversation.message_count == 3
    assert conversation.last_activity_at > first_activity


@pytest.mark.django_db
def test_first_user_message_names_an_untitled_conversation(owner):
    conversation = services.conversation_create(owner=owner)
    services.user_message_append(
        conversation=conversation, content="  Plan a weekend\nin Lisbon for two " + "x" * 100
    )
    conversation.refresh_from_db()
    assert conversation.title.startswith("Plan a weekend in Lisbon for two")
    assert len(conversation.title) <= 80
    services.user_message_append(conversation=conversation, content="Another topic")
    conversation.refresh_from_db()
    assert conversation.title.startswith("Plan a weekend")


@pytest.mark.django_db
@pytest.mark.parametrize(
    "content",
    ["", "   \n", "x" * 100_001, "bad \x00", "lone \ud800 surrogate"],
    ids=["empty", "blank", "too-long", "nul", "surrogate"],
)
def test_user_message_refuses_bad_content_and_stores_nothing(conversation, content):
    with pytest.raises(ValidationFailed):
        services.user_message_append(conversation=conversation, content=content)
    conversation.refresh_from_db()
    assert conversation.message_count == 0
    assert not conversation.messages.exists()


@pytest.mark.django_db
def test_a_failed_append_leaves_no_gap(conversation):
    services.message_append(conversation=conversation, message=NewMessage(role="user", content="a"))
    # A tool message without a call id violates a constraint; the whole append rolls back.
    with pytest.raises(IntegrityError), transaction.atomic():
        services.messages_append(
            conversation=conversation,
            messages=[NewMessage(role="assistant", content="b"), NewMessage(role="tool")],
        )
    nxt = services.message_append(
        conversation=conversation, message=NewMessage(role="user", content="c")
    )
    assert nxt.seq == 2
    conversation.refresh_from_db()
    assert conversation.message_count == 2


@pytest.mark.django_db
@pytest.mark.parametrize(
    "fields",
    [{"role": "robot"}, {"role": "user", "kind": "event"}, {"role": "user", "kind": "other"}],
    ids=["unknown-role", "event-not-system", "unknown-kind"],
)
def test_database_refuses_roles_and_kinds_outside_their_sets(conversation, fields):
    with pytest.raises(IntegrityError), transaction.atomic():
        Message.objects.create(
            conversation=conversation, branch_id=conversation.active_branch_id, seq=1, **fields
        )


@pytest.mark.django_db
def test_database_refuses_a_duplicate_seq_on_a_branch(conversation):
    branch = conversation.active_branch_id
    Message.objects.create(conversation=conversation, branch_id=branch, seq=1, role="user")
    with pytest.raises(IntegrityError), transaction.atomic():
        Message.objects.create(conversation=conversation, branch_id=branch, seq=1, role="assistant")


@pytest.mark.django_db
def test_at_most_one_active_run_per_conversation(conversation):
    Run.objects.create(conversation=conversation, status="completed")
    Run.objects.create(conversation=conversation, status="queued")
    with pytest.raises(IntegrityError), transaction.atomic():
        Run.objects.create(conversation=conversation, status="in_progress")
    with pytest.raises(IntegrityError), transaction.atomic():
        Run.objects.create(conversation=conversation, status="paused")


@pytest.mark.django_db
def test_assistant_draft_change_clears_a_pending_user_edit(conversation):
    services.conversation_draft_update(conversation=conversation, draft="mine")
    conversation.refresh_from_db()
    assert conversation.draft_edited is True
    services.conversation_draft_update(conversation=conversation, draft="model's", by_user=False)
    conversation.refresh_from_db()
    assert (conversation.draft, conversation.draft_edited) == ("model's", False)


@pytest.mark.django_db
def test_an_assistant_draft_write_records_its_call_and_a_user_edit_keeps_it(conversation):
    services.conversation_draft_update(
        conversation=conversation, draft="model's", by_user=False, call_id="call_1"
    )
    services.conversation_draft_update(conversation=conversation, draft="mine")
    conversation.refresh_from_db()
    assert (conversation.draft, conversation.draft_call_id) == ("mine", "call_1")
    # Finding its text already in place, a call has still done its write.
    services.conversation_draft_update(
        conversation=conversation, draft="mine", by_user=False, call_id="call_2"
    )
    conversation.refresh_from_db()
    assert (conversation.draft, conversation.draft_call_id) == ("mine", "call_2")


@pytest.mark.django_db
def test_draft_update_refuses_an_overlong_call_id(conversation):
    with pytest.raises(ValidationFailed) as excinfo:
        services.conversation_draft_update(
            conversation=conversation, draft="text", by_user=False, call_id="c" * 201
        )
    assert problems_of(excinfo) == {"$.call_id": "is 201 characters long; the limit is 200"}
    conversation.refresh_from_db()
    assert (conversation.draft, conversation.draft_call_id) == ("", "")


@pytest.mark.django_db
def test_only_the_users_changes_count_as_draft_edits(conversation):
    services.conversation_draft_update(conversation=conversation, draft="mine")
    services.conversation_draft_update(conversation=conversation, draft="mine")  # unchanged
    services.conversation_draft_update(conversation=conversation, draft="model's", by_user=False)
    with transaction.atomic():
        services.conversation_draft_update(conversation=conversation, draft="mine again")
        transaction.set_rollback(True)  # a rolled back edit counts for nothing
    assert Conversation.objects.get(pk=conversation.pk).draft_edit_count == 1


@pytest.mark.django_db
def test_an_assistant_write_over_an_unseen_user_edit_is_refused_whole(conversation):
    services.conversation_draft_update(conversation=conversation, draft="mine")
    with pytest.raises(DraftEditedMeanwhile) as excinfo:
        services.conversation_draft_update(
            conversation=conversation, draft="model's", by_user=False, call_id="c1", edits_seen=0
        )
    assert excinfo.value.draft == "mine"
    conversation.refresh_from_db()
    assert (conversation.draft, conversation.draft_edited, conversation.draft_call_id) == (
        "mine",
        True,
        "",
    )


@pytest.mark.django_db
def test_context_event_starts_no_run_and_is_a_system_event(conversation):
    event = services.context_event_add(conversation=conversation, content="Checked in")
    assert (event.role, event.kind, event.seq) == ("system", "event", 1)
    assert not Run.objects.exists()


def _fill(conversation: Conversation, count: int) -> None:
    run = Run.objects.create(conversation=conversation, status="completed")
    now = timezone.now()
    root = conversation.active_branch_id
    assert root is not None
    Message.objects.bulk_create(
        Message(
            conversation=conversation,
            branch_id=root,
            seq=i + 1,
            role="user" if i % 2 == 0 else "assistant",
            content=f"message {i}",
            run=run,
            created_at=now + timedelta(microseconds=i),
        )
        for i in range(count)
    )
    Run.objects.filter(pk=run.pk).update(
        trigger_message=Message.objects.get(conversation=conversation, seq=1)
    )
    Conversation.objects.filter(pk=conversation.pk).update(message_count=count)
    Branch.objects.filter(pk=root).update(message_count=count)
    conversation.refresh_from_db()


@pytest.mark.django_db
def test_delete_removes_everything_without_loading_messages(conversation, owner):
    _fill(conversation, 2000)
    other = services.conversation_create(owner=owner, title="Keep me")
    _fill(other, 3)
    fork = services.conversation_fork(conversation=conversation, at_seq=2)

    with CaptureQueriesContext(connection) as queries:
        services.conversation_delete(conversation=conversation)

    sql = [q["sql"].upper() for q in queries.captured_queries]
    # One DELETE per table, no SELECT of message rows into Python, a bounded query count
    # (one UPDATE marks the files its messages used for the sweep; its share links and its
    # tags go in one DELETE each).
    assert not any(s.startswith("SELECT") and "CONVERSATIONS_MESSAGE" in s for s in sql)
    assert len(sql) <= 13
    assert not Message.objects.filter(conversation_id=conversation.pk).exists()
    assert not Run.objects.filter(conversation_id=conversation.pk).exists()
    assert Message.objects.filter(conversation=other).count() == 3
    fork.refresh_from_db()
    assert fork.forked_from is None
    assert fork.messages.count() == 2


@pytest.mark.django_db
def test_deleting_a_user_removes_their_conversations_only(owner, outsider):
    mine = services.conversation_create(owner=owner)
    _fill(mine, 50)
    theirs = services.conversation_create(owner=outsider)
    _fill(theirs, 5)

    User.objects.filter(pk=owner.pk).delete()

    assert not Conversation.objects.filter(pk=mine.pk).exists()
    assert not Message.objects.filter(conversation_id=mine.pk).exists()
    assert Message.objects.filter(conversation=theirs).count() == 5


@pytest.mark.django_db
def test_a_fork_keeps_the_generation_settings_and_whether_the_model_takes_images(owner):
    conversation = services.conversation_create(
        owner=owner, title="Tuned", temperature=0.3, max_output_tokens=200, vision=False
    )
    services.user_message_append(conversation=conversation, content="Hello")

    fork = services.conversation_fork(conversation=conversation, at_seq=1)

    assert (fork.temperature, fork.max_output_tokens, fork.vision) == (0.3, 200, False)
