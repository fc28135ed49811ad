"""A file goes, bytes included, within a minute of its last message: whichever door
deleted the conversation, and never while another message still uses it."""

import pytest
from django.db.models import Q

from conversations import services, tasks
from conversations.models import Conversation, StoredFile
from tests.support.files import file_make, stored_names

pytestmark = pytest.mark.django_db


def attach(conversation: Conversation, stored: StoredFile) -> None:
    services.user_message_append(
        conversation=conversation, content="See file.", attachments=[str(stored.pk)]
    )


def sweep(capture) -> int:
    with capture(execute=True):
        return int(tasks.files_released_sweep()["files"])


def test_deleting_the_conversation_deletes_its_files_at_the_next_sweep(
    owner, conversation, django_capture_on_commit_callbacks
):
    stored = file_make(owner, b"in one chat only")
    kept = file_make(owner, b"uploaded, never sent")
    attach(conversation, stored)

    services.conversation_delete(conversation=conversation)
    assert StoredFile.objects.filter(pk=stored.pk).exists()  # until the sweep

    assert sweep(django_capture_on_commit_callbacks) == 1
    assert list(StoredFile.objects.all()) == [kept]
    assert stored_names() == [kept.storage_name]


def test_the_sweep_runs_every_minute(settings):
    schedule = {
        entry["task"]: entry["schedule"] for entry in settings.CELERY_BEAT_SCHEDULE.values()
    }
    assert schedule["conversations.tasks.files_released_sweep"] <= 60


def test_a_file_another_message_uses_stays(owner, django_capture_on_commit_callbacks):
    first = services.conversation_create(owner=owner, title="First")
    second = services.conversation_create(owner=owner, title="Second")
    stored = file_make(owner, b"shared by two chats")
    attach(first, stored)
    attach(second, stored)

    services.conversation_delete(conversation=first)
    assert sweep(django_capture_on_commit_callbacks) == 0
    assert StoredFile.objects.get(pk=stored.pk).released_at is None
    assert stored_names() == [stored.storage_name]

    services.conversation_delete(conversation=second)
    assert sweep(django_capture_on_commit_callbacks) == 1
    assert stored_names() == []


def test_a_fork_keeps_the_files_of_the_conversation_it_came_from(
    owner, conversation, django_capture_on_commit_callbacks
):
    stored = file_make(owner, b"forked along")
    attach(conversation, stored)
    fork = services.conversation_fork(conversation=conversation, at_seq=1)

    services.conversation_delete(conversation=conversation)
    assert sweep(django_capture_on_commit_callbacks) == 0
    assert fork.attachments.get().file_id == stored.pk


def test_a_file_attached_again_before_the_sweep_stays(
    owner, conversation, django_capture_on_commit_callbacks
):
    stored = file_make(owner, b"sent again")
    attach(conversation, stored)
    services.conversation_delete(conversation=conversation)
    again = services.conversation_create(owner=owner, title="Again")
    attach(again, stored)

    assert sweep(django_capture_on_commit_callbacks) == 0
    assert StoredFile.objects.filter(pk=stored.pk, released_at=None).exists()


@pytest.mark.parametrize("door", ["admin-delete", "retention-purge", "account-delete"])
def test_every_door_that_deletes_conversations_releases_their_files(
    door, owner, outsider, settings, django_capture_on_commit_callbacks
):
    conversation = services.conversation_create(owner=owner, title="Gone")
    stored = file_make(owner, b"bytes of a deleted chat")
    attach(conversation, stored)
    theirs = file_make(outsider, b"someone else's")
    attach(services.conversation_create(owner=outsider, title="Theirs"), theirs)

    with django_capture_on_commit_callbacks(execute=True):
        if door == "admin-delete":
            services.conversations_delete(
                actor=None, queryset=Conversation.objects.filter(pk=conversation.pk)
            )
        elif door == "retention-purge":
            settings.PARLEY_RETENTION_DAYS = 1
            Conversation.objects.filter(pk=conversation.pk).update(
                last_activity_at="2000-01-01T00:00:00Z"
            )
            services.conversations_purge()
        else:
            services.user_delete(actor=None, user=owner)
    sweep(django_capture_on_commit_callbacks)

    assert not StoredFile.objects.filter(Q(pk=stored.pk)).exists()
    assert stored_names() == [theirs.storage_name]


def test_a_file_left_unused_without_release_goes_a_day_after_its_last_use(
    owner, conversation, settings, django_capture_on_commit_callbacks
):
    from datetime import timedelta

    from django.utils import timezone

    from conversations.models import Attachment

    settings.PARLEY_FILE_ORPHAN_SECONDS = 3600
    stored = file_make(owner, b"unlinked behind the services' back")
    attach(conversation, stored)
    Attachment.objects.filter(file=stored).delete()  # not released
    long_ago = timezone.now() - timedelta(hours=2)
    StoredFile.objects.filter(pk=stored.pk).update(created_at=long_ago)
    with django_capture_on_commit_callbacks(execute=True):
        assert services.files_orphans_sweep() == 0  # attached within the hour

    StoredFile.objects.filter(pk=stored.pk).update(attached_at=long_ago)
    with django_capture_on_commit_callbacks(execute=True):
        assert services.files_orphans_sweep() == 1
    assert stored_names() == []
