"""An import stores a large document in short transactions, the conversation hidden until
the last one; what a failed or abandoned import stored goes away; and the work grows with
the document, whatever its shape (many branches sharing a time, deep nesting)."""

import json
from datetime import timedelta
from typing import Any

import pytest
from django.db import DatabaseError, transaction
from django.utils import timezone

from conversations import selectors, services, tasks
from conversations.errors import QuotaExceeded, ValidationFailed
from conversations.formats import exporting
from conversations.models import Branch, Conversation, Message
from conversations.services import imports
from tests.support import shapes
from tests.support.chatgpt import Chat


def chain(count: int) -> bytes:
    roles = ("user", "assistant")
    return json.dumps(
        {"messages": [{"role": roles[i % 2], "content": f"m{i}"} for i in range(count)]}
    ).encode()


@pytest.mark.django_db(transaction=True)
def test_a_large_import_commits_in_batches_and_stays_hidden_until_the_last(owner, monkeypatch):
    monkeypatch.setattr(imports, "BATCH_ROWS", 100)
    seen: list[tuple[int, int]] = []  # at each commit: messages stored, conversations shown
    commit = transaction.Atomic.__exit__

    def watched(atomic: transaction.Atomic, *exc: Any) -> None:
        commit(atomic, *exc)
        if not transaction.get_connection().in_atomic_block:
            shown = Conversation.objects.filter(owner=owner).count()
            seen.append((Message.objects.filter(conversation__owner=owner).count(), shown))

    monkeypatch.setattr(transaction.Atomic, "__exit__", watched)
    conversation = services.conversation_import(owner=owner, document=chain(450))
    monkeypatch.setattr(transaction.Atomic, "__exit__", commit)

    stored = [count for count, _ in seen]
    steps = [later - earlier for earlier, later in zip([0, *stored], stored, strict=False)]
    assert max(steps) <= 100, steps
    assert stored[-1] == 450
    assert [shown for _, shown in seen[:-1]] == [0] * (len(seen) - 1)
    assert seen[-1][1] == 1
    assert selectors.conversation_get(user=owner, conversation_id=conversation.pk)


@pytest.mark.django_db
def test_a_conversation_being_imported_is_nowhere_to_be_seen(owner, as_user):
    hidden = Conversation.objects.create(
        owner=owner, title="half", import_started_at=timezone.now()
    )
    assert hidden.active_branch_id is not None
    Message.objects.create(
        conversation=hidden, branch_id=hidden.active_branch_id, seq=1, role="user", content="zebra"
    )
    api = as_user(owner)
    assert api.get("/api/v1/conversations/").json()["results"] == []
    assert api.get(f"/api/v1/conversations/{hidden.pk}/").status_code == 404
    assert api.get(f"/api/v1/conversations/{hidden.pk}/messages/").status_code == 404
    assert api.get("/api/v1/search/?q=zebra").json()["results"] == []


@pytest.mark.django_db
def test_a_failed_batch_leaves_nothing_of_the_import(owner, monkeypatch):
    monkeypatch.setattr(imports, "BATCH_ROWS", 50)
    calls = {"n": 0}
    original = Message.objects.bulk_create

    def failing(rows: Any, *args: Any, **kwargs: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 3:
            raise DatabaseError("disk full")
        return original(rows, *args, **kwargs)

    monkeypatch.setattr(Message.objects, "bulk_create", failing)
    with pytest.raises(DatabaseError):
        services.conversation_import(owner=owner, document=chain(200))
    assert calls["n"] == 3
    assert not Conversation.with_imports.filter(owner=owner).exists()
    assert not Message.objects.filter(conversation__owner=owner).exists()
    assert not Branch.objects.filter(conversation__owner=owner).exists()


@pytest.mark.django_db
def test_an_abandoned_import_is_deleted_by_the_hourly_clean_up(owner):
    now = timezone.now()
    abandoned = Conversation.objects.create(owner=owner, import_started_at=now - timedelta(hours=2))
    assert abandoned.active_branch_id is not None
    Message.objects.create(
        conversation=abandoned, branch_id=abandoned.active_branch_id, seq=1, role="user"
    )
    running = Conversation.objects.create(owner=owner, import_started_at=now - timedelta(minutes=5))
    shown = Conversation.objects.create(owner=owner)

    assert tasks.conversations_purge()["abandoned_imports"] == 1
    assert set(Conversation.with_imports.filter(owner=owner)) == {running, shown}
    assert not Message.objects.filter(conversation_id=abandoned.pk).exists()


@pytest.mark.django_db
def test_an_import_under_way_counts_against_the_conversation_quota(owner, settings):
    settings.PARLEY_MAX_CONVERSATIONS_PER_USER = 1
    Conversation.objects.create(owner=owner, import_started_at=timezone.now())
    with pytest.raises(QuotaExceeded):
        services.conversation_import(owner=owner, document=chain(2))


class _Steps:
    """Counts the microsecond steps the import takes to give branches distinct times."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, *args: Any, **kwargs: Any) -> timedelta:
        self.count += 1
        return timedelta(*args, **kwargs)


@pytest.mark.django_db
def test_branches_sharing_one_time_take_a_step_each_and_keep_their_order(owner, monkeypatch):
    steps = _Steps()
    monkeypatch.setattr(imports, "timedelta", steps)
    document = shapes.siblings(1500)
    conversation = services.conversation_import(owner=owner, document=document)

    assert steps.count <= 2 * 1500
    exported = exporting.export_json(conversation)
    written = [m["content"] for m in json.loads(document)["messages"]]
    assert [m["content"] for m in exported["messages"]] == written
    times = [b["created_at"] for b in exported["branches"]]
    assert len(set(times)) == len(times) == 1500


@pytest.mark.django_db
def test_a_chatgpt_root_with_many_children_at_one_time_takes_a_step_each(owner, monkeypatch):
    steps = _Steps()
    monkeypatch.setattr(imports, "timedelta", steps)
    chat = Chat()
    for index in range(1500):
        chat.add("root", "user", f"version {index}", create_time=1_700_000_000.0)
    report = services.conversations_import_chatgpt(
        owner=owner, document=json.dumps([chat.conversation()]).encode()
    )
    imported = report.results[0].conversation
    assert imported is not None
    assert imported.branch_count == 1500
    assert steps.count <= 2 * 1500


@pytest.mark.django_db
def test_branches_nested_past_the_storage_bound_are_refused_and_nothing_stored(owner, settings):
    settings.PARLEY_IMPORT_MAX_MESSAGES = 100  # ten links each: 1,000
    with pytest.raises(ValidationFailed) as refused:
        # 51 branches, each forked from the one before: 1,275 links.
        services.conversation_import(owner=owner, document=shapes.staircase(50))
    assert refused.value.problems[0].path == "$.branches"
    assert "nest too deeply" in refused.value.problems[0].message
    assert not Conversation.with_imports.filter(owner=owner).exists()

    conversation = services.conversation_import(owner=owner, document=shapes.staircase(44))
    assert conversation.branch_count == 45
