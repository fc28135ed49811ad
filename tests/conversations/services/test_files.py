"""The files store: deduplication per owner, the quota under concurrent uploads, deletes
that take the bytes after the commit, the sweep of unused files, an account's bytes."""

import io
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from conversations import services
from conversations.errors import ParleyError
from conversations.models import Attachment, Conversation, StoredFile
from tests.support.files import file_make, stored_names
from tests.support.threads import run_threads


def attach(conversation: Conversation, stored: StoredFile) -> Attachment:
    message = services.user_message_append(
        conversation=conversation, content="See file.", attachments=[str(stored.pk)]
    )
    return Attachment.objects.get(message=message)


def age(stored: StoredFile, seconds: int) -> None:
    StoredFile.objects.filter(pk=stored.pk).update(
        created_at=timezone.now() - timedelta(seconds=seconds)
    )


@pytest.mark.django_db
def test_the_sweep_takes_old_unused_files_and_their_bytes_only(
    owner, conversation, settings, django_capture_on_commit_callbacks
):
    settings.PARLEY_FILE_ORPHAN_SECONDS = 3600
    old_unused = file_make(owner, b"old and unused")
    old_used = file_make(owner, b"old but attached")
    young = file_make(owner, b"just uploaded")
    attach(conversation, old_used)
    for stored in (old_unused, old_used):
        age(stored, 7200)
    with django_capture_on_commit_callbacks(execute=True):
        assert services.files_orphans_sweep() == 1
    assert set(StoredFile.objects.values_list("pk", flat=True)) == {old_used.pk, young.pk}
    assert stored_names() == sorted([old_used.storage_name, young.storage_name])


@pytest.mark.django_db
def test_the_beat_task_sweeps(owner, settings, django_capture_on_commit_callbacks):
    from conversations import tasks

    settings.PARLEY_FILE_ORPHAN_SECONDS = 0
    stored = file_make(owner)
    age(stored, 1)
    with django_capture_on_commit_callbacks(execute=True):
        assert tasks.files_orphans_sweep() == {"files": 1}
    assert stored_names() == []
    assert "conversations.tasks.files_orphans_sweep" in {
        entry["task"] for entry in settings.CELERY_BEAT_SCHEDULE.values()
    }


@pytest.mark.django_db
def test_deleting_an_account_deletes_its_files_bytes_only(
    owner, outsider, conversation, django_capture_on_commit_callbacks
):
    attach(conversation, file_make(owner, b"attached"))
    file_make(owner, b"unattached")
    theirs = file_make(outsider, b"attached")
    with django_capture_on_commit_callbacks(execute=True):
        services.user_delete(actor=None, user=owner)
    assert list(StoredFile.objects.all()) == [theirs]
    assert stored_names() == [theirs.storage_name]


@pytest.mark.django_db
def test_bytes_stay_when_the_same_bytes_come_back_before_the_delete_commits(
    owner, django_capture_on_commit_callbacks
):
    stored = file_make(owner, b"back again")
    with django_capture_on_commit_callbacks(execute=True):
        services.file_delete(file=stored)
        again = file_make(owner, b"back again")  # before the deletion's callback runs
    assert stored_names() == [again.storage_name]


@pytest.mark.django_db
def test_a_file_in_use_is_refused_and_kept(owner, conversation):
    stored = file_make(owner)
    attach(conversation, stored)
    with pytest.raises(ParleyError) as refused:
        services.file_delete(file=stored)
    assert refused.value.code == "file_in_use"
    assert StoredFile.objects.filter(pk=stored.pk).exists()


@pytest.mark.django_db
def test_a_refused_store_leaves_no_bytes_behind(owner, settings, monkeypatch):
    def fail(**_: object) -> None:
        raise RuntimeError("the database went away")

    monkeypatch.setattr(StoredFile.objects, "create", fail)
    staged = services.file_stage(source=io.BytesIO(b"never kept"))
    with pytest.raises(RuntimeError):
        services.file_store(owner=owner, staged=staged, filename="a.txt")
    staged.close()
    assert stored_names() == []


@pytest.mark.django_db(transaction=True)
def test_concurrent_uploads_cannot_pass_the_quota_together(owner, settings):
    settings.PARLEY_FILE_QUOTA_BYTES = 25
    outcomes: list[str] = []

    def upload(data: bytes) -> None:
        staged = services.file_stage(source=io.BytesIO(data))
        try:
            services.file_store(owner=owner, staged=staged, filename="a.txt")
            outcomes.append("stored")
        except ParleyError as error:
            outcomes.append(error.code)
        finally:
            staged.close()
            connection.close()

    run_threads(lambda: upload(b"a" * 15), lambda: upload(b"b" * 15))
    assert sorted(outcomes) == ["file_quota_exceeded", "stored"]
    assert StoredFile.objects.count() == 1
    assert len(stored_names()) == 1
