"""The migration to branches: every conversation gets its root branch, every message and
run moves onto it, and the conversations read exactly as before."""

import uuid

import pytest
from django.db import connection
from django.utils import timezone

from conversations import selectors
from conversations.models import Branch, Conversation, Message, Run
from tests.support.migrations import latest, migrate

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE = [("conversations", "0014_conversation_search_trigram")]


def test_existing_conversations_move_onto_their_root_branch(monkeypatch):
    # Small batches, so the fill's paging is exercised too.
    from conversations.migrations import _branch_fill

    monkeypatch.setattr(_branch_fill, "ROW_BATCH", 7)
    monkeypatch.setattr(_branch_fill, "CONVERSATION_BATCH", 2)
    executor = migrate(BEFORE)
    apps = executor.loader.project_state(BEFORE).apps
    OldUser = apps.get_model("accounts", "User")
    OldConversation = apps.get_model("conversations", "Conversation")
    OldMessage = apps.get_model("conversations", "Message")
    OldRun = apps.get_model("conversations", "Run")
    user = OldUser.objects.create(username="old-timer")
    sizes = [0, 3, 12, 5, 1]
    ids = []
    for size in sizes:
        conversation = OldConversation.objects.create(
            id=uuid.uuid4(), owner=user, message_count=size
        )
        run = OldRun.objects.create(id=uuid.uuid4(), conversation=conversation, status="completed")
        OldMessage.objects.bulk_create(
            OldMessage(
                id=uuid.uuid4(),
                conversation=conversation,
                seq=seq,
                role="user" if seq % 2 else "assistant",
                content=f"{conversation.id} #{seq}",
                run=run,
                created_at=timezone.now(),
            )
            for seq in range(1, size + 1)
        )
        ids.append(conversation.id)

    migrate(latest())

    for conversation_id, size in zip(ids, sizes, strict=True):
        conversation = Conversation.objects.get(pk=conversation_id)
        root = Branch.objects.get(conversation=conversation)
        assert conversation.active_branch_id == root.pk
        assert (root.parent_id, root.fork_seq, root.message_count) == (None, 0, size)
        assert conversation.branch_count == 1
        page = selectors.message_page(conversation=conversation, limit=50).items
        assert [m.content for m in page] == [f"{conversation_id} #{s}" for s in range(1, size + 1)]
        assert {m.branch_id for m in page} <= {root.pk}
        assert Run.objects.get(conversation=conversation).branch_id == root.pk
    assert not Message.objects.filter(branch__isnull=True).exists()


@pytest.mark.skipif(connection.vendor != "postgresql", reason="a PostgreSQL constraint trigger")
def test_the_database_refuses_a_fork_point_that_is_not_on_the_parent(owner):
    from django.db import IntegrityError, transaction

    from conversations import services

    conversation = services.conversation_create(owner=owner)
    root = Branch.objects.get(conversation=conversation)
    services.messages_append(
        conversation=conversation,
        messages=[services.NewMessage(role="user", content="only one")],
    )

    def checked(fork_seq: int, parent: Branch = root) -> None:
        with transaction.atomic():
            Branch.objects.create(
                conversation=conversation,
                parent=parent,
                fork_seq=fork_seq,
                message_count=fork_seq,
            )
            with connection.cursor() as cursor:
                cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")

    with pytest.raises(IntegrityError):
        checked(2)
    # A fork at 0 must hang on the root, not on another branch.
    other = Branch.objects.create(conversation=conversation, parent=root, fork_seq=0)
    with pytest.raises(IntegrityError):
        checked(0, parent=other)
    # On the parent's own message: accepted.
    checked(1)
    assert Branch.objects.filter(conversation=conversation).count() == 3


@pytest.mark.skipif(connection.vendor != "postgresql", reason="a PostgreSQL constraint trigger")
def test_a_branch_deleted_with_its_conversation_before_commit_is_not_checked(owner):
    from django.db import transaction

    from conversations import services

    with transaction.atomic():
        conversation = services.conversation_create(owner=owner)
        services.messages_append(
            conversation=conversation,
            messages=[services.NewMessage(role="user", content=f"m{i}") for i in range(3)],
        )
        services.branch_fork(
            conversation=conversation,
            source=Branch.objects.get(conversation=conversation),
            fork_seq=2,
        )
        services.conversation_delete(conversation=conversation)
        with connection.cursor() as cursor:
            cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
    assert not Branch.objects.filter(conversation_id=conversation.pk).exists()
