"""Imports and forks made before copies were marked stop counting as the owner's usage."""

import importlib
import json
from datetime import timedelta

import pytest
from django.apps import apps
from django.utils import timezone

from conversations import engine, selectors, services
from conversations.formats import exporting
from conversations.models import Message
from conversations.services import NewMessage
from tests.support.admin import chat

pytestmark = pytest.mark.django_db

migration = importlib.import_module("conversations.migrations.0009_mark_earlier_copies")


def test_earlier_imports_and_forks_are_marked_as_copies(owner, outsider):
    original = chat(owner, turns=2)  # 4 messages, 30 tokens: spent here
    forged = exporting.export_json(original)
    for message in forged["messages"]:
        message["created_at"] = (timezone.now() - timedelta(hours=1)).isoformat()
    forged["messages"][1]["usage"] = {"total_tokens": 9_000_000}
    imported = services.conversation_import(owner=outsider, document=json.dumps(forged))
    fork = services.conversation_fork(conversation=original, at_seq=2)
    # After the import and the fork, each goes on here: that is their owner's own use.
    for conversation in (imported, fork):
        _, run = engine.run_start(conversation=conversation, content="and then?")
        services.message_append(
            conversation=conversation,
            message=NewMessage(
                role="assistant", content="then this.", usage={"total_tokens": 7}, run_id=run.pk
            ),
        )
    # As the rows stood before copies were marked.
    Message.objects.update(copied=False)
    migration.mark(apps, None)

    copies = Message.objects.filter(copied=True)
    assert set(copies.filter(conversation=imported).values_list("seq", flat=True)) == {1, 2, 3, 4}
    assert set(copies.filter(conversation=fork).values_list("seq", flat=True)) == {1, 2}
    assert not copies.filter(conversation=original).exists()
    today = timezone.now().date()
    users = selectors.usage_by_user(start=today, end=today)
    assert sorted((u.username, u.messages, u.tokens) for u in users) == [
        ("alice", 6, 37),
        ("mallory", 2, 7),
    ]
    migration.mark(apps, None)  # running it again changes nothing
    assert Message.objects.filter(copied=True).count() == 6
