"""`files/`: upload (typed from the bytes, limited while it streams), list, details,
download with safe headers, delete; another user's file is 404 everywhere."""

import pytest
import yaml
from django.core.files.uploadedfile import SimpleUploadedFile
from django.utils.crypto import get_random_string
from rest_framework.test import APIClient

from accounts import services as account_services
from conversations import services
from conversations.models import Attachment, StoredFile
from tests.support.api import error_of
from tests.support.files import PDF, file_make, image_bytes, png_header, stored_names, upload

pytestmark = pytest.mark.django_db

PNG = image_bytes("PNG")


@pytest.mark.parametrize(
    ("data", "name", "expected"),
    [
        (PNG, "x.pdf", "image/png"),
        (image_bytes("JPEG"), "photo.png", "image/jpeg"),
        (image_bytes("GIF"), "anim.txt", "image/gif"),
        (image_bytes("WEBP"), "pic", "image/webp"),
        (PDF, "report.png", "application/pdf"),
        ("Hello, wörld.\n".encode(), "notes.exe", "text/plain"),
        (b"# Title\n\nSome *text*.\n", "readme.md", "text/markdown"),
        (b"a,b\n1,2\n", "table.csv", "text/csv"),
        (b'{"a": [1, 2]}', "data.txt", "application/json"),
        (b'{"a": [1, 2', "broken.json", "text/plain"),
    ],
)
def test_the_type_comes_from_the_bytes_whatever_the_name_or_header(api, data, name, expected):
    response = upload(api, data, name, content_type="application/pdf")
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["content_type"] == expected
    assert (body["filename"], body["size"]) == (name, len(data))
    assert set(body) >= {"id", "sha256", "created_at"}
    if expected.startswith("image/"):
        assert (body["width"], body["height"]) == (4, 3)


@pytest.mark.parametrize(
    ("data", "name"),
    [
        (b"<!DOCTYPE html><html><script>alert(1)</script></html>", "x.png"),
        (b'<svg xmlns="http://www.w3.org/2000/svg"><script>alert(1)</script></svg>', "a.svg"),
        (b'<?xml version="1.0"?><note/>', "n.txt"),
        (b"PK\x03\x04" + bytes(40), "a.zip"),
        (b"\x7fELF\x02\x01\x01" + bytes(60), "run.txt"),
        (b"text with a \x00 NUL", "a.txt"),
        ("latin-1 caf\xe9".encode("latin-1"), "a.txt"),
        (b"\x89PNG\r\n\x1a\n" + b"garbage" * 10, "broken.png"),
    ],
)
def test_other_types_are_refused_415_and_nothing_is_stored(api, data, name):
    response = upload(api, data, name, content_type="image/png")
    assert response.status_code == 415, response.content
    assert error_of(response)["code"] == "unsupported_file_type"
    assert not StoredFile.objects.exists()
    assert stored_names() == []


def test_an_empty_file_or_none_at_all_is_a_400(api):
    assert error_of(upload(api, b"", "empty.txt"))["code"] == "invalid"
    response = api.post("/api/v1/files/", {"other": "x"}, format="multipart")
    assert response.status_code == 400
    assert error_of(response)["details"]["problems"][0]["path"] == "$.file"
    assert not StoredFile.objects.exists()


def test_the_same_bytes_twice_are_one_file_stored_once(api, owner):
    first = upload(api, PNG, "first.png")
    second = upload(api, PNG, "second.png")
    assert (first.status_code, second.status_code) == (201, 200)
    assert second.json() == first.json()  # the first name is kept
    assert StoredFile.objects.count() == 1
    assert stored_names() == [f"files/{owner.pk}/{first.json()['sha256']}"]


def test_two_owners_with_the_same_bytes_each_have_their_own(
    api, as_user, outsider, django_capture_on_commit_callbacks
):
    mine = upload(api, PNG, "mine.png").json()
    theirs = upload(as_user(outsider), PNG, "theirs.png").json()
    assert mine["id"] != theirs["id"]
    assert len(stored_names()) == 2
    with django_capture_on_commit_callbacks(execute=True):
        assert api.delete(f"/api/v1/files/{mine['id']}/").status_code == 204
    assert len(stored_names()) == 1
    assert as_user(outsider).get(f"/api/v1/files/{theirs['id']}/content").status_code == 200


def test_a_file_over_the_size_limit_is_413_and_nothing_is_kept(api, settings):
    settings.PARLEY_FILE_MAX_BYTES = 1000
    response = upload(api, b"a" * 1001, "big.txt")
    assert response.status_code == 413
    assert error_of(response)["code"] == "file_too_large"
    assert "1000" in error_of(response)["message"]
    assert not StoredFile.objects.exists()
    assert stored_names() == []
    assert upload(api, b"a" * 1000, "fits.txt").status_code == 201


def test_a_pixel_bomb_is_refused_400_before_decoding(api, settings):
    response = upload(api, png_header(100_000, 100_000), "bomb.png")
    assert response.status_code == 400, response.content
    assert error_of(response)["code"] == "image_too_large"
    settings.PARLEY_FILE_MAX_IMAGE_PIXELS = 100
    response = upload(api, image_bytes("PNG", (11, 10)), "wide.png")
    assert error_of(response)["code"] == "image_too_large"
    assert "11x10" in error_of(response)["message"]
    assert not StoredFile.objects.exists()
    assert stored_names() == []


def test_the_quota_is_413_once_the_users_files_would_pass_it(api, owner, settings):
    settings.PARLEY_FILE_QUOTA_BYTES = 25
    assert upload(api, b"x" * 20, "a.txt").status_code == 201
    response = upload(api, b"y" * 6, "b.txt")
    assert response.status_code == 413
    assert error_of(response)["code"] == "file_quota_exceeded"
    assert StoredFile.objects.count() == 1
    assert len(stored_names()) == 1
    # The same bytes again take no more room.
    assert upload(api, b"x" * 20, "again.txt").status_code == 200
    assert upload(api, b"z" * 5, "c.txt").status_code == 201


def test_a_type_outside_the_setting_is_refused(api, settings):
    settings.PARLEY_FILE_TYPES = ["text/plain"]
    assert upload(api, PNG, "x.png").status_code == 415
    assert upload(api, b"plain", "x.txt").status_code == 201


def test_list_and_details_are_the_owners(api, as_user, outsider):
    ids = [upload(api, f"file {n}".encode(), f"{n}.txt").json()["id"] for n in range(3)]
    upload(as_user(outsider), b"not yours", "x.txt")
    page = api.get("/api/v1/files/?limit=2").json()
    assert [f["id"] for f in page["results"]] == ids[::-1][:2]
    rest = api.get(page["next"]).json()
    assert ([f["id"] for f in rest["results"]], rest["next"]) == ([ids[0]], None)
    detail = api.get(f"/api/v1/files/{ids[1]}/").json()
    assert (detail["filename"], detail["content_type"]) == ("1.txt", "text/plain")


@pytest.mark.parametrize(
    ("data", "name", "content_type", "disposition"),
    [
        (PNG, "pic.png", "image/png", "inline"),
        (PDF, "doc.pdf", "application/pdf", "attachment"),
        (b"# Hi\n", "notes.md", "text/markdown; charset=utf-8", "attachment"),
    ],
)
def test_content_is_served_safely(api, data, name, content_type, disposition):
    file_id = upload(api, data, name).json()["id"]
    response = api.get(f"/api/v1/files/{file_id}/content", HTTP_ACCEPT="image/webp")
    assert response.status_code == 200
    assert b"".join(response.streaming_content) == data
    assert response["Content-Type"] == content_type
    assert response["Content-Length"] == str(len(data))
    assert response["Content-Disposition"].startswith(disposition)
    assert name in response["Content-Disposition"]
    assert response["X-Content-Type-Options"] == "nosniff"
    assert "sandbox" in response["Content-Security-Policy"]
    assert "default-src 'none'" in response["Content-Security-Policy"]


def test_a_hostile_name_is_made_safe(api):
    body = upload(api, b"hi", "../../etc/\x00pass\u202ewd.txt").json()
    assert body["filename"] == "passwd.txt"
    response = api.get(f"/api/v1/files/{body['id']}/content")
    assert 'filename="passwd.txt"' in response["Content-Disposition"]


def test_delete_removes_the_row_and_the_bytes(api, django_capture_on_commit_callbacks):
    file_id = upload(api, PNG, "x.png").json()["id"]
    with django_capture_on_commit_callbacks(execute=True):
        assert api.delete(f"/api/v1/files/{file_id}/").status_code == 204
    assert not StoredFile.objects.exists()
    assert stored_names() == []
    assert api.get(f"/api/v1/files/{file_id}/").status_code == 404


def test_a_file_a_message_uses_cannot_be_deleted(api, owner, conversation):
    stored = file_make(owner)
    message = services.user_message_append(conversation=conversation, content="See file.")
    Attachment.objects.create(conversation=conversation, message=message, file=stored, position=0)
    response = api.delete(f"/api/v1/files/{stored.pk}/")
    assert response.status_code == 409
    assert error_of(response)["code"] == "file_in_use"
    assert StoredFile.objects.filter(pk=stored.pk).exists()
    assert len(stored_names()) == 1


@pytest.mark.parametrize(("method", "suffix"), [("get", "/"), ("get", "/content"), ("delete", "/")])
def test_another_users_file_or_a_malformed_id_is_404(api, outsider, method, suffix):
    theirs = file_make(outsider)
    for file_id in (theirs.pk, "not-a-uuid"):
        response = getattr(api, method)(f"/api/v1/files/{file_id}{suffix}")
        assert response.status_code == 404, response.content
        assert error_of(response)["code"] == "not_found"
    assert StoredFile.objects.filter(pk=theirs.pk).exists()


def test_a_read_key_lists_and_downloads_but_cannot_upload_or_delete(owner):
    stored = file_make(owner)
    _, secret = account_services.api_key_create(owner=owner, name="reader", scopes=["read"])
    reader = APIClient()
    reader.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    assert reader.get("/api/v1/files/").status_code == 200
    assert reader.get(f"/api/v1/files/{stored.pk}/content").status_code == 200
    for response in (upload(reader, b"x"), reader.delete(f"/api/v1/files/{stored.pk}/")):
        assert response.status_code == 403
        assert error_of(response)["code"] == "insufficient_scope"


def test_the_schema_documents_the_file_endpoints(api):
    schema = yaml.safe_load(api.get("/api/schema/").content)
    assert {"/api/v1/files/", "/api/v1/files/{file_id}/", "/api/v1/files/{file_id}/content"} <= set(
        schema["paths"]
    )
    upload_op = schema["paths"]["/api/v1/files/"]["post"]
    assert "multipart/form-data" in upload_op["requestBody"]["content"]


def test_a_browser_session_uploads_with_its_csrf_token_and_not_without(owner):
    browser = APIClient(enforce_csrf_checks=True)
    browser.force_login(owner)
    secret = get_random_string(32)  # a CSRF secret, also taken unmasked as the token
    browser.cookies["csrftoken"] = secret
    refused = upload(browser, b"no token")
    assert refused.status_code == 403
    assert not StoredFile.objects.exists()
    part = SimpleUploadedFile("a.txt", b"with a token")
    response = browser.post(
        "/api/v1/files/",
        {"file": part},
        format="multipart",
        HTTP_X_CSRFTOKEN=secret,
    )
    assert response.status_code == 201, response.content
