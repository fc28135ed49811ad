"""`export/?format=zip` and its import: the JSON and the files' bytes in one archive, back
as another user's conversation with the same files (and a plain JSON document naming
files, which the importing user must have already)."""

import json
import zipfile
from collections.abc import AsyncIterator
from typing import Any, cast

import pytest
from asgiref.sync import sync_to_async
from django.http import StreamingHttpResponse
from django.test import AsyncClient
from rest_framework.test import APIClient

from conversations import services
from conversations.models import Attachment, Conversation, StoredFile
from tests.support.api import error_of
from tests.support.bundles import (
    CSV,
    NOTES,
    PNG,
    attachments_shown,
    body_of,
    file_content,
    nothing_stored_for,
    sha256_of,
    with_files,
    zip_entries,
    zip_export,
    zip_exported,
    zip_import,
)
from tests.support.documents import export_comparable
from tests.support.files import file_make, stored_names

pytestmark = pytest.mark.django_db

TOKEN = "csrf" * 8


@pytest.mark.parametrize("multipart", [False, True], ids=["raw-body", "multipart"])
def test_a_zip_export_imports_as_another_users_conversation_with_the_same_files(
    api, outsider_api, outsider, trip, multipart
):
    conversation = trip[0]
    response = zip_export(api, conversation)
    assert response["Content-Type"] == "application/zip"
    assert response["Content-Disposition"] == (
        f'attachment; filename="conversation-{conversation.pk}.zip"'
    )
    archive = body_of(response)
    entries = zip_entries(archive)
    assert sorted(entries) == sorted(
        ["conversation.json", *(f"files/{sha256_of(d)}" for d in (PNG, CSV, NOTES))]
    )
    document = json.loads(entries["conversation.json"])
    assert document["version"] == 2
    named = [[a["filename"] for a in m["attachments"]] for m in document["messages"]]
    assert named == [["holiday [1].png", "rain.csv"], [], ["rain.csv", "notes.md"]]

    imported = zip_import(outsider_api, archive, multipart=multipart)
    assert imported.status_code == 201, imported.content
    new_id = imported.json()["id"]
    theirs = attachments_shown(outsider_api, new_id)
    mine = attachments_shown(api, str(conversation.pk))
    shape = [[(a["filename"], a["content_type"], a["size"]) for a in m] for m in theirs]
    assert shape == [[(a["filename"], a["content_type"], a["size"]) for a in m] for m in mine]
    assert shape[0][0] == ("holiday [1].png", "image/png", len(PNG))
    # The importing user's own files: new ids, the bytes stored once each.
    assert StoredFile.objects.filter(owner=outsider).count() == 3
    assert {a["id"] for m in theirs for a in m}.isdisjoint({str(f.pk) for f in trip[1]})
    assert theirs[0][1]["id"] == theirs[2][0]["id"]
    assert [file_content(outsider_api, a["id"]) for a in theirs[0] + theirs[2]] == [
        PNG,
        CSV,
        CSV,
        NOTES,
    ]
    # The same document again, apart from what an import changes (ids).
    again = zip_entries(zip_exported(outsider_api, Conversation.objects.get(pk=new_id)))
    assert {n for n in again if n != "conversation.json"} == {
        n for n in entries if n != "conversation.json"
    }
    assert export_comparable(json.loads(again["conversation.json"])) == export_comparable(document)


def test_the_importing_user_keeps_bytes_they_had_once(api, outsider_api, outsider, trip):
    theirs = file_make(outsider, CSV, "their-table.csv")
    imported = zip_import(outsider_api, zip_exported(api, trip[0]))
    assert imported.status_code == 201, imported.content
    assert StoredFile.objects.filter(owner=outsider).count() == 3
    assert attachments_shown(outsider_api, imported.json()["id"])[0][1]["id"] == str(theirs.pk)


@pytest.mark.parametrize("multipart", [False, True], ids=["raw-body", "multipart"])
def test_a_browser_session_imports_a_zip_with_its_csrf_token(api, outsider, trip, multipart):
    browser = APIClient(enforce_csrf_checks=True)
    browser.force_login(outsider)
    browser.cookies["csrftoken"] = TOKEN
    response = zip_import(
        browser, zip_exported(api, trip[0]), multipart=multipart, HTTP_X_CSRFTOKEN=TOKEN
    )
    assert response.status_code == 201, response.content
    assert StoredFile.objects.filter(owner=outsider).count() == 3


def test_another_users_zip_export_is_404(outsider_api, trip):
    response = zip_export(outsider_api, trip[0])
    assert response.status_code == 404
    assert error_of(response)["code"] == "not_found"


def test_a_zip_of_version_1_is_refused(api, trip):
    response = api.get(f"/api/v1/conversations/{trip[0].pk}/export/?format=zip&version=1")
    assert response.status_code == 400
    assert error_of(response)["details"]["problems"][0]["path"] == "$.query.version"


def test_a_conversation_without_files_exports_a_zip_of_its_document(api, conversation):
    entries = zip_entries(zip_exported(api, conversation))
    assert list(entries) == ["conversation.json"]
    assert json.loads(entries["conversation.json"])["messages"] == []


def test_a_zip_export_failing_part_way_ends_unreadable(api, trip):
    services.files_storage().delete(trip[1][1].storage_name)
    body = zip_exported(api, trip[0])
    with pytest.raises(zipfile.BadZipFile):
        zip_entries(body)


def test_an_idempotent_zip_import_is_answered_again_without_a_second_copy(
    api, outsider_api, outsider, trip
):
    archive = zip_exported(api, trip[0])
    first = zip_import(outsider_api, archive, HTTP_IDEMPOTENCY_KEY="zip-1")
    second = zip_import(outsider_api, archive, HTTP_IDEMPOTENCY_KEY="zip-1")
    assert first.status_code == second.status_code == 201
    assert first.json()["id"] == second.json()["id"]
    assert Conversation.objects.filter(owner=outsider).count() == 1


# --- a plain JSON document naming files ------------------------------------------------------


def _document(client: Any, conversation: Conversation) -> bytes:
    response = client.get(f"/api/v1/conversations/{conversation.pk}/export/")
    assert response.status_code == 200
    return body_of(response)


def test_json_naming_files_the_user_lacks_is_refused_naming_them(api, outsider_api, outsider, trip):
    response = outsider_api.post(
        "/api/v1/conversations/import/", _document(api, trip[0]), content_type="application/json"
    )
    assert response.status_code == 400
    problems = error_of(response)["details"]["problems"]
    assert [p["path"] for p in problems] == [
        "$.messages[0].attachments[0].sha256",
        "$.messages[0].attachments[1].sha256",
        "$.messages[2].attachments[1].sha256",
    ]
    assert sha256_of(PNG) in problems[0]["message"]
    nothing_stored_for(outsider)


def test_json_naming_files_the_user_has_links_them(api, trip, owner):
    response = api.post(
        "/api/v1/conversations/import/", _document(api, trip[0]), content_type="application/json"
    )
    assert response.status_code == 201, response.content
    files = attachments_shown(api, response.json()["id"])
    picture, table, notes = trip[1]
    assert [[a["id"] for a in m] for m in files] == [
        [str(picture.pk), str(table.pk)],
        [],
        [str(table.pk), str(notes.pk)],
    ]
    assert StoredFile.objects.filter(owner=owner).count() == 3
    assert Attachment.objects.filter(file=table).count() == 4


# --- under ASGI ------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("close_thread_connections")
async def test_under_asgi_the_zip_export_streams_and_ends(owner):
    conversation, _ = await sync_to_async(with_files)(owner)
    client = AsyncClient()
    await client.aforce_login(owner)
    got = await client.get(f"/api/v1/conversations/{conversation.pk}/export/?format=zip")
    assert got.status_code == 200
    assert isinstance(got, StreamingHttpResponse)
    chunks = cast(AsyncIterator[bytes], got.streaming_content)
    body = b"".join([chunk async for chunk in chunks])
    assert zip_entries(body)[f"files/{sha256_of(PNG)}"] == PNG


@pytest.mark.django_db(transaction=True)
def test_outside_a_test_transaction_a_failed_import_leaves_nothing_and_a_good_one_stays(
    owner, outsider, as_user, settings
):
    """Each write commits as it does in production: the files stored before a refusal are
    deleted, bytes included, once their deletion commits."""
    settings.PARLEY_MAX_CONVERSATIONS_PER_USER = 5
    api, outsider_api = as_user(owner), as_user(outsider)
    conversation, _ = with_files(owner)
    archive = zip_exported(api, conversation)
    settings.PARLEY_FILE_QUOTA_BYTES = len(PNG) + len(CSV)
    refused = zip_import(outsider_api, archive)
    assert refused.status_code == 413
    nothing_stored_for(outsider)
    settings.PARLEY_FILE_QUOTA_BYTES = 0
    assert zip_import(outsider_api, archive).status_code == 201
    assert len([n for n in stored_names() if n.startswith(f"files/{outsider.pk}/")]) == 3
