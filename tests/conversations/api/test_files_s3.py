"""Files kept in an S3-compatible bucket (a local server the tests start): uploads land as
one object per owner and content, downloads stream back the same bytes with the same
headers as from the file system, refusals leave no object, and every way a file goes
(delete, a deleted conversation's sweep, a deleted account) takes its object too."""

import tracemalloc

import pytest

from conversations import services
from conversations.models import Attachment, StoredFile
from tests.support.api import error_of
from tests.support.files import PDF, file_make, image_bytes, upload
from tests.support.s3_server import s3_files_use

pytestmark = pytest.mark.django_db

PNG = image_bytes("PNG")
MIB = 1024 * 1024


def test_an_upload_is_one_object_named_by_owner_and_sha256(api, owner, s3_files):
    response = upload(api, PNG, "cat.png")
    assert response.status_code == 201, response.content
    sha256 = response.json()["sha256"]
    assert s3_files.keys() == [f"files/{owner.pk}/{sha256}"]
    assert s3_files.read(f"files/{owner.pk}/{sha256}") == PNG


@pytest.mark.parametrize(
    ("data", "name", "content_type", "disposition"),
    [
        (PNG, "pic.png", "image/png", "inline"),
        (PDF, "doc.pdf", "application/pdf", "attachment"),
        (b"# Hi\n", "notes.md", "text/markdown; charset=utf-8", "attachment"),
    ],
)
def test_a_download_streams_the_bytes_with_the_usual_headers(
    api, s3_files, data, name, content_type, disposition
):
    file_id = upload(api, data, name).json()["id"]
    response = api.get(f"/api/v1/files/{file_id}/content")
    assert response.status_code == 200
    assert response.streaming
    assert b"".join(response.streaming_content) == data
    assert response["Content-Type"] == content_type
    assert response["Content-Length"] == str(len(data))
    assert response["Content-Disposition"].startswith(disposition)
    assert name in response["Content-Disposition"]
    assert response["X-Content-Type-Options"] == "nosniff"
    assert "sandbox" in response["Content-Security-Policy"]


def test_a_file_larger_than_one_read_comes_back_whole(api, s3_files):
    data = "".join(f"line {i}\n" for i in range(100_000)).encode()  # several reads of it
    file_id = upload(api, data, "big.txt").json()["id"]
    response = api.get(f"/api/v1/files/{file_id}/content")
    assert b"".join(response.streaming_content) == data


def test_a_download_streams_and_holds_no_copy(api, owner, s3_files):
    data = b"b" * (12 * MIB)
    file_id = str(file_make(owner, data, "big.txt").pk)
    services.files_storage().exists("warm-up")
    tracemalloc.start()
    try:
        response = api.get(f"/api/v1/files/{file_id}/content")
        size = sum(len(chunk) for chunk in response.streaming_content)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert size == len(data)
    assert peak < 2 * MIB, f"{peak / MIB:.1f} MiB"


def test_the_same_bytes_twice_are_one_object(api, owner, s3_files):
    first = upload(api, PNG, "first.png")
    second = upload(api, PNG, "second.png")
    assert (first.status_code, second.status_code) == (201, 200)
    assert len(s3_files.keys()) == 1
    assert StoredFile.objects.count() == 1


def test_another_users_file_is_404_and_its_object_stays(api, as_user, outsider, s3_files):
    file_id = upload(as_user(outsider), PNG, "theirs.png").json()["id"]
    assert api.get(f"/api/v1/files/{file_id}/content").status_code == 404
    assert api.delete(f"/api/v1/files/{file_id}/").status_code == 404
    assert len(s3_files.keys()) == 1


def test_a_delete_takes_the_object_after_the_commit(
    api, s3_files, django_capture_on_commit_callbacks
):
    file_id = upload(api, PNG, "x.png").json()["id"]
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        assert api.delete(f"/api/v1/files/{file_id}/").status_code == 204
    assert len(s3_files.keys()) == 1  # not before the commit
    for callback in callbacks:
        callback()
    assert s3_files.keys() == []


def test_refused_uploads_leave_no_object(api, s3_files, settings):
    settings.PARLEY_FILE_MAX_BYTES = 1000
    settings.PARLEY_FILE_QUOTA_BYTES = 1500
    assert error_of(upload(api, b"a" * 1001, "big.txt"))["code"] == "file_too_large"
    svg = b'<svg xmlns="http://www.w3.org/2000/svg"><script>alert(1)</script></svg>'
    assert error_of(upload(api, svg, "x.svg"))["code"] == "unsupported_file_type"
    assert upload(api, b"b" * 1000, "fits.txt").status_code == 201
    assert error_of(upload(api, b"c" * 600, "over.txt"))["code"] == "file_quota_exceeded"
    assert len(s3_files.keys()) == 1
    assert StoredFile.objects.count() == 1


def test_a_deleted_conversations_files_go_with_the_sweep(
    owner, conversation, s3_files, django_capture_on_commit_callbacks
):
    stored = file_make(owner, b"attached")
    message = services.user_message_append(conversation=conversation, content="See file.")
    Attachment.objects.create(conversation=conversation, message=message, file=stored, position=0)
    services.conversation_delete(conversation=conversation)
    with django_capture_on_commit_callbacks(execute=True):
        assert services.files_released_sweep() == 1
    assert s3_files.keys() == []


def test_an_account_delete_takes_its_objects_only(
    owner, outsider, s3_files, django_capture_on_commit_callbacks
):
    file_make(owner, b"one")
    file_make(owner, b"two")
    theirs = file_make(outsider, b"one")
    with django_capture_on_commit_callbacks(execute=True):
        services.user_delete(actor=None, user=owner)
    assert s3_files.keys() == [theirs.storage_name]


def test_a_prefix_puts_every_object_under_it(api, owner, s3_server, settings, monkeypatch):
    bucket = s3_files_use(
        server=s3_server, settings=settings, monkeypatch=monkeypatch, prefix="parley/"
    )
    body = upload(api, PNG, "x.png").json()
    assert bucket.keys() == [f"parley/files/{owner.pk}/{body['sha256']}"]
    response = api.get(f"/api/v1/files/{body['id']}/content")
    assert b"".join(response.streaming_content) == PNG
