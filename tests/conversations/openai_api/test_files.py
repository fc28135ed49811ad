"""Files over /openai/v1/ with the official SDK: uploaded onto the same store as
/api/v1/files/ (typed from the bytes, deduplicated, limited), listed, retrieved, read with
the safe headers, deleted; another user's file is not found anywhere."""

import io

import openai
import pytest
from openai.types import FileDeleted, FileObject

from conversations import services
from conversations.models import StoredFile
from tests.support.files import file_make, image_bytes, stored_names
from tests.support.openai_api import body_of
from tests.support.sdk_types import assert_sdk_shape

pytestmark = pytest.mark.django_db

PNG = image_bytes("PNG")


def upload(client: openai.OpenAI, data: bytes, name: str = "note.txt", purpose: str = "user_data"):
    return client.files.create(file=(name, io.BytesIO(data)), purpose=purpose)  # type: ignore[arg-type]


def test_an_upload_answers_openais_file_object_and_lands_in_the_same_store(client, owner):
    uploaded = client.files.with_raw_response.create(
        file=("notes.md", io.BytesIO(b"# Cats\n\nThey purr.\n")), purpose="user_data"
    )
    raw = uploaded.http_response.json()
    assert_sdk_shape(FileObject, raw)
    made = uploaded.parse()
    assert made.id.startswith("file-")
    assert (made.object, made.bytes, made.filename) == ("file", 19, "notes.md")
    assert (made.purpose, made.status) == ("user_data", "processed")
    stored = StoredFile.objects.get(owner=owner)
    assert made.id == f"file-{stored.pk.hex}"
    assert stored.content_type == "text/markdown"
    assert made.created_at == int(stored.created_at.timestamp())
    # Never attached yet: swept once a day old, and the object says when.
    assert made.expires_at == made.created_at + 24 * 3600
    assert stored_names() == [stored.storage_name]


def test_the_same_bytes_give_the_same_file_and_every_model_purpose_is_user_data(client):
    first = upload(client, PNG, "a.png", purpose="vision")
    again = upload(client, PNG, "b.png", purpose="assistants")
    assert again.id == first.id
    assert (again.filename, again.purpose) == ("a.png", "user_data")
    assert StoredFile.objects.count() == 1


@pytest.mark.parametrize(
    ("form", "param", "code"),
    [
        ({"purpose": "fine-tune"}, "purpose", "unsupported_value"),
        ({}, "purpose", "missing_required_parameter"),
        ({"purpose": "user_data", "color": "red"}, "color", "unknown_parameter"),
    ],
)
def test_a_purpose_not_for_models_or_a_stray_field_is_refused(raw, form, param, code):
    answer = raw.post("/files", data=form, files={"file": ("a.txt", b"words")})
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert (error["param"], error["code"]) == (param, code)
    assert StoredFile.objects.count() == 0
    assert stored_names() == []


def test_no_file_is_refused(raw):
    answer = raw.post("/files", data={"purpose": "user_data"})
    assert answer.status_code == 400
    assert answer.json()["error"]["param"] == "file"


@pytest.mark.parametrize(
    ("data", "status", "code"),
    [
        (b"<svg xmlns='http://www.w3.org/2000/svg'></svg>", 415, "unsupported_file_type"),
        (b"x" * 2048, 413, "file_too_large"),
    ],
    ids=["svg", "too-large"],
)
def test_refused_uploads_store_nothing(client, settings, data, status, code):
    settings.PARLEY_FILE_MAX_BYTES = 1024
    with pytest.raises(openai.APIStatusError) as refused:
        upload(client, data)
    assert refused.value.status_code == status
    assert body_of(refused.value)["code"] == code
    assert StoredFile.objects.count() == 0
    assert stored_names() == []


def test_past_the_quota_is_refused(client, settings):
    settings.PARLEY_FILE_QUOTA_BYTES = 10
    with pytest.raises(openai.APIStatusError) as refused:
        upload(client, b"eleven bytes")
    assert refused.value.status_code == 413
    assert body_of(refused.value)["code"] == "file_quota_exceeded"
    assert StoredFile.objects.count() == 0


def test_the_list_holds_ones_own_files_and_pages_both_ways(client, owner, outsider):
    made = [upload(client, f"file {n}".encode(), f"f{n}.txt") for n in range(5)]
    file_make(outsider, b"not yours", "theirs.txt")
    newest_first = [f.id for f in reversed(made)]
    assert [f.id for f in client.files.list()] == newest_first
    page = client.files.list(limit=2)
    assert [f.id for f in page.data] == newest_first[:2]
    assert page.has_more is True
    assert [f.id for f in client.files.list(limit=2)] == newest_first  # the SDK pages on
    ascending = client.files.list(order="asc", after=made[1].id)
    assert [f.id for f in ascending.data] == [f.id for f in made[2:]]
    assert [f.id for f in client.files.list(purpose="batch")] == []
    assert len(list(client.files.list(purpose="user_data"))) == 5


def test_retrieve_read_and_delete(client):
    made = upload(client, b"a,b\n1,2\n", "table.csv")
    assert client.files.retrieve(made.id) == made
    content = client.files.with_raw_response.content(made.id).http_response
    assert content.content == b"a,b\n1,2\n"
    assert content.headers["content-type"] == "text/csv; charset=utf-8"
    assert content.headers["x-content-type-options"] == "nosniff"
    assert content.headers["content-security-policy"] == "default-src 'none'; sandbox"
    assert content.headers["content-disposition"].startswith("attachment")
    deleted = client.files.with_raw_response.delete(made.id).http_response.json()
    assert_sdk_shape(FileDeleted, deleted)
    assert deleted == {"id": made.id, "object": "file", "deleted": True}
    with pytest.raises(openai.NotFoundError):
        client.files.retrieve(made.id)


def test_the_plain_uuid_of_api_v1_names_the_same_file(client, owner):
    stored = file_make(owner, b"plain", "p.txt")
    assert client.files.retrieve(str(stored.pk)).id == f"file-{stored.pk.hex}"


def test_a_file_a_message_uses_is_not_deleted(client, owner, conversation):
    stored = file_make(owner, PNG, "cat.png")
    services.user_message_append(
        conversation=conversation, content="Look", attachments=[str(stored.pk)]
    )
    with pytest.raises(openai.ConflictError) as refused:
        client.files.delete(f"file-{stored.pk.hex}")
    assert body_of(refused.value)["code"] == "file_in_use"
    assert refused.value.response.headers["x-should-retry"] == "false"
    assert StoredFile.objects.filter(pk=stored.pk).exists()


def test_another_users_file_is_not_found_anywhere(client, outsider, sdk):
    theirs = upload(sdk(outsider), b"private words", "secret.txt")
    for call in (
        lambda: client.files.retrieve(theirs.id),
        lambda: client.files.content(theirs.id),
        lambda: client.files.delete(theirs.id),
        lambda: client.files.retrieve("file-" + "0" * 32),
        lambda: client.files.retrieve("nonsense"),
    ):
        with pytest.raises(openai.NotFoundError) as refused:
            call()
        assert body_of(refused.value)["code"] == "not_found"
    assert theirs.id not in [f.id for f in client.files.list()]
    assert StoredFile.objects.count() == 1
