"""An upload streams: its bytes go to a temporary file as they arrive, never whole into
memory; one announced larger than the limit is refused unread, and one that passes the
limit while streaming is refused there, the rest unread. Nothing is left behind."""

import tracemalloc
from typing import Any

import pytest

from accounts import services as account_services
from conversations import uploads
from conversations.models import StoredFile
from tests.support.files import Letters, MultipartBody, stored_names, streamed_post

pytestmark = pytest.mark.django_db

MIB = 1024 * 1024


def post(owner: Any, body: MultipartBody) -> Any:
    _, secret = account_services.api_key_create(owner=owner, name="k", scopes=["chat"])
    return streamed_post(body, secret)


def letters(size: int) -> MultipartBody:
    return MultipartBody(Letters(size), size)


@pytest.fixture
def upload_temp(settings, tmp_path) -> Any:
    settings.FILE_UPLOAD_TEMP_DIR = str(tmp_path)
    return tmp_path


def test_an_upload_announced_over_the_limit_is_refused_unread(owner, settings, upload_temp):
    settings.PARLEY_FILE_MAX_BYTES = MIB
    body = letters(30 * MIB)
    response = post(owner, body)
    assert response.status_code == 413
    assert b"file_too_large" in response.content
    assert body.position == 0
    assert not StoredFile.objects.exists()
    assert stored_names() == []
    assert list(upload_temp.iterdir()) == []


def test_an_upload_passing_the_limit_while_it_streams_stops_there(
    owner, settings, upload_temp, monkeypatch
):
    settings.PARLEY_FILE_MAX_BYTES = MIB
    # The announced length let through: the limit is then held while the body streams.
    monkeypatch.setattr(uploads, "ENVELOPE_BYTES", 64 * MIB)
    body = letters(30 * MIB)
    response = post(owner, body)
    assert response.status_code == 413
    assert b"file_too_large" in response.content
    # Read up to the chunk that passed the limit, and the parser's one read ahead: the
    # rest of the 30 MiB is never read.
    assert body.position <= MIB + 2 * uploads.StagingUploadHandler.chunk_size
    assert not StoredFile.objects.exists()
    assert stored_names() == []
    assert list(upload_temp.iterdir()) == []


def test_a_large_upload_is_stored_without_being_held_in_memory(owner, settings, upload_temp):
    settings.PARLEY_FILE_MAX_BYTES = 40 * MIB
    body = letters(30 * MIB)
    tracemalloc.start()
    try:
        response = post(owner, body)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert response.status_code == 201, response.content
    assert StoredFile.objects.get().size == 30 * MIB
    assert peak < 4 * MIB, f"peak {peak / MIB:.1f} MiB"
    assert list(upload_temp.iterdir()) == []
