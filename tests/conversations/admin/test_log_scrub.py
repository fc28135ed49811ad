"""Old admin log entries lose the titles they carried."""

import importlib

import pytest
from django.apps import apps
from django.contrib.admin.models import DELETION, LogEntry
from django.contrib.contenttypes.models import ContentType

from conversations.models import Conversation

pytestmark = pytest.mark.django_db

scrub = importlib.import_module("conversations.migrations.0008_scrub_conversation_log_titles")


def test_old_log_entries_of_conversations_lose_their_titles(superuser):
    kind = ContentType.objects.get_for_model(Conversation)
    entry = LogEntry.objects.create(
        user=superuser,
        content_type=kind,
        object_id="2746ca1a-0000-0000-0000-000000000000",
        object_repr="the secret recipe is 3 eggs",
        action_flag=DELETION,
    )
    other = LogEntry.objects.create(
        user=superuser,
        content_type=ContentType.objects.get_for_model(LogEntry),
        object_id="1",
        object_repr="kept as it was",
        action_flag=DELETION,
    )
    scrub.scrub(apps, None)
    entry.refresh_from_db()
    other.refresh_from_db()
    assert entry.object_repr == "untitled conversation · 2746ca1a"
    assert other.object_repr == "kept as it was"
