"""Refusals of a ZIP import: a damaged or lying archive, one past a limit (checked
before anything is unpacked), a file missing, refused as an upload would be or past the
quota, and an import failing late: each stores nothing, files and bytes included."""

import io
from typing import Any

import pytest

from conversations import services
from conversations.formats import bundles
from conversations.models import StoredFile
from conversations.services import imports
from tests.support.api import error_of
from tests.support.bundles import (
    CSV,
    NOTES,
    PNG,
    bundle_with,
    nothing_stored_for,
    sha256_of,
    zip_damaged,
    zip_exported,
    zip_import,
    zip_of,
    zip_parts,
)

pytestmark = pytest.mark.django_db


def test_bytes_that_do_not_hash_to_their_name_are_refused(
    api, outsider_api, outsider, trip, commits
):
    document, files = zip_parts(api, trip[0])
    files[f"files/{sha256_of(CSV)}"] = b"city,rain\nOslo,99\n"
    with commits(execute=True):
        response = zip_import(outsider_api, bundle_with(document, files))
    assert response.status_code == 400
    problem = error_of(response)["details"]["problems"][0]
    assert problem["path"] == f"files/{sha256_of(CSV)}"
    assert "sha256" in problem["message"]
    nothing_stored_for(outsider)


def test_a_file_the_document_names_must_be_in_the_zip(api, outsider_api, outsider, trip, commits):
    document, files = zip_parts(api, trip[0])
    del files[f"files/{sha256_of(NOTES)}"]
    with commits(execute=True):
        response = zip_import(outsider_api, bundle_with(document, files))
    assert response.status_code == 400
    problem = error_of(response)["details"]["problems"][0]
    assert problem["path"] == "$.messages[2].attachments[1].sha256"
    assert sha256_of(NOTES) in problem["message"]
    nothing_stored_for(outsider)


def test_a_size_the_bytes_do_not_have_is_refused(api, outsider_api, outsider, trip, commits):
    document, files = zip_parts(api, trip[0])
    document["messages"][0]["attachments"][0]["size"] += 1
    with commits(execute=True):
        response = zip_import(outsider_api, bundle_with(document, files))
    assert response.status_code == 400
    assert error_of(response)["details"]["problems"][0]["path"] == (
        "$.messages[0].attachments[0].size"
    )
    nothing_stored_for(outsider)


def test_a_file_refused_as_an_upload_would_be_leaves_none_of_the_others(
    api, outsider_api, outsider, trip, commits
):
    document, files = zip_parts(api, trip[0])
    page = b"<!DOCTYPE html><html><script>alert(1)</script></html>"
    # Listed last, so the files before it are stored first, then taken away again.
    document["messages"][2]["attachments"][1].update(sha256=sha256_of(page), size=len(page))
    del files[f"files/{sha256_of(NOTES)}"]
    files[f"files/{sha256_of(page)}"] = page
    with commits(execute=True):
        response = zip_import(outsider_api, bundle_with(document, files))
    assert response.status_code == 415
    assert error_of(response)["message"].startswith(f"files/{sha256_of(page)}: ")
    nothing_stored_for(outsider)


def test_a_file_past_the_quota_leaves_none_of_the_others(
    api, outsider_api, outsider, trip, settings, commits
):
    settings.PARLEY_FILE_QUOTA_BYTES = len(PNG) + len(CSV)
    with commits(execute=True):
        response = zip_import(outsider_api, zip_exported(api, trip[0]))
    assert response.status_code == 413
    assert error_of(response)["code"] == "file_quota_exceeded"
    nothing_stored_for(outsider)


def test_a_user_at_their_conversation_quota_stores_no_file(
    api, outsider_api, outsider, trip, settings, commits
):
    settings.PARLEY_MAX_CONVERSATIONS_PER_USER = 1
    assert zip_import(outsider_api, zip_exported(api, trip[0])).status_code == 201
    files = StoredFile.objects.filter(owner=outsider).count()
    document, entries = zip_parts(api, trip[0])
    entries[f"files/{sha256_of(b'new bytes')}"] = b"new bytes"
    document["messages"][1]["attachments"] = [
        {
            "id": str(trip[1][0].pk),
            "filename": "new.txt",
            "content_type": "text/plain",
            "size": 9,
            "sha256": sha256_of(b"new bytes"),
        }
    ]
    with commits(execute=True):
        response = zip_import(outsider_api, bundle_with(document, entries))
    assert response.status_code == 429
    assert error_of(response)["code"] == "conversation_quota_exceeded"
    assert StoredFile.objects.filter(owner=outsider).count() == files


@pytest.mark.parametrize("broken", ["too-many", "twice"])
def test_a_messages_files_are_checked_as_a_sends_are(
    api, outsider_api, outsider, trip, settings, commits, broken
):
    document, files = zip_parts(api, trip[0])
    if broken == "too-many":
        settings.PARLEY_FILE_MAX_PER_MESSAGE = 1
        path = "$.messages[0].attachments"
    else:
        attachments = document["messages"][2]["attachments"]
        attachments[1] = dict(attachments[0])
        path = "$.messages[2].attachments[1].sha256"
    with commits(execute=True):
        response = zip_import(outsider_api, bundle_with(document, files))
    assert response.status_code == 400
    assert error_of(response)["details"]["problems"][0]["path"] == path
    nothing_stored_for(outsider)


@pytest.mark.parametrize(
    "body",
    [
        b"PK\x03\x04 this is not really a zip",
        b"PK\x05\x06" + bytes(18),
        "truncated",
        "no-document",
        "badly-named",
        "damaged",
    ],
)
def test_a_damaged_or_malformed_zip_is_refused(api, outsider_api, outsider, trip, body, commits):
    archive = zip_exported(api, trip[0])
    if body == "truncated":
        body = archive[: len(archive) // 2]
    elif body == "no-document":
        body = zip_of({f"files/{sha256_of(CSV)}": CSV})
    elif body == "badly-named":
        document, files = zip_parts(api, trip[0])
        body = bundle_with(document, {**files, "files/rain.csv": CSV})
    elif body == "damaged":
        body = zip_damaged(archive, f"files/{sha256_of(CSV)}")
    with commits(execute=True):
        response = zip_import(outsider_api, body)
    assert response.status_code == 400, response.content
    assert error_of(response)["message"]
    nothing_stored_for(outsider)


@pytest.mark.parametrize(
    ("setting", "value", "code"),
    [
        ("PARLEY_IMPORT_ZIP_MAX_BYTES", 1000, "request_too_large"),
        ("PARLEY_IMPORT_ZIP_MAX_UNPACKED_BYTES", 1000, "request_too_large"),
        ("PARLEY_IMPORT_ZIP_MAX_ENTRIES", 3, "request_too_large"),
        ("PARLEY_FILE_MAX_BYTES", 40, "file_too_large"),
        ("PARLEY_IMPORT_MAX_BYTES", 100, "request_too_large"),
    ],
)
@pytest.mark.parametrize("multipart", [False, True], ids=["raw-body", "multipart"])
def test_a_zip_past_a_limit_is_refused_413(
    api, outsider_api, outsider, trip, settings, setting, value, code, multipart, commits
):
    archive = zip_exported(api, trip[0])
    setattr(settings, setting, value)
    with commits(execute=True):
        response = zip_import(outsider_api, archive, multipart=multipart)
    assert response.status_code == 413, response.content
    assert error_of(response)["code"] == code
    nothing_stored_for(outsider)


def test_a_zip_bomb_is_refused_from_its_directory_before_it_is_unpacked(
    outsider_api, outsider, settings, monkeypatch
):
    settings.PARLEY_IMPORT_ZIP_MAX_UNPACKED_BYTES = 10 * 1024 * 1024
    bomb = zip_of({"conversation.json": b"{}", "files/" + "0" * 64: bytes(50 * 1024 * 1024)})
    assert len(bomb) < 100 * 1024
    unpacked: list[str] = []
    monkeypatch.setattr(bundles.Bundle, "_unpacked", lambda self, info: unpacked.append(info))
    response = zip_import(outsider_api, bomb)
    assert response.status_code == 413
    assert "unpacks to" in error_of(response)["message"]
    assert unpacked == []
    nothing_stored_for(outsider)


def test_an_import_failing_after_its_files_were_stored_takes_them_away(
    api, outsider, trip, commits, monkeypatch
):
    archive = zip_exported(api, trip[0])

    def broken(batch: Any, root: Any) -> None:
        raise RuntimeError("the database went away")

    monkeypatch.setattr(imports._Batch, "store", broken)
    with commits(execute=True), pytest.raises(RuntimeError):
        services.conversation_import_bundle(owner=outsider, archive=io.BytesIO(archive))
    nothing_stored_for(outsider)
