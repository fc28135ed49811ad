"""ZIP exports: made by hand (to break them on purpose), read back, and sent to the import."""

import hashlib
import io
import json
import struct
import zipfile
from typing import Any

from django.core.files.uploadedfile import SimpleUploadedFile

from accounts.models import User
from conversations import services
from conversations.models import Conversation, StoredFile
from tests.support.files import file_make, image_bytes, stored_names

PNG = image_bytes("PNG", (8, 6))
CSV = b"city,rain\nOslo,12\nBergen,30\n"
NOTES = b"# Notes\n\nBring an umbrella.\n"


def sha256_of(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def zip_of(entries: dict[str, bytes], compression: int = zipfile.ZIP_DEFLATED) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compression=compression) as archive:
        for name, data in entries.items():
            archive.writestr(name, data)
    return out.getvalue()


def zip_damaged(data: bytes, name: str) -> bytes:
    """The archive with a byte in the middle of entry `name`'s packed data flipped."""
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        info = archive.getinfo(name)
    name_length, extra_length = struct.unpack(
        "<HH", data[info.header_offset + 26 : info.header_offset + 30]
    )
    start = info.header_offset + 30 + name_length + extra_length
    middle = start + info.compress_size // 2
    return data[:middle] + bytes([data[middle] ^ 0xFF]) + data[middle + 1 :]


def zip_entries(data: bytes) -> dict[str, bytes]:
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        return {name: archive.read(name) for name in archive.namelist()}


def body_of(response: Any) -> bytes:
    return b"".join(response.streaming_content) if response.streaming else response.content


def zip_export(client: Any, conversation: Conversation) -> Any:
    return client.get(f"/api/v1/conversations/{conversation.pk}/export/?format=zip")


def zip_import(client: Any, data: bytes, *, multipart: bool = False, **headers: str) -> Any:
    """POST conversations/import/ with `data` as the raw body (application/zip), or as the
    multipart field `file`."""
    if multipart:
        part = SimpleUploadedFile("export.zip", data, content_type="application/zip")
        return client.post(
            "/api/v1/conversations/import/", {"file": part}, format="multipart", **headers
        )
    return client.post(
        "/api/v1/conversations/import/", data, content_type="application/zip", **headers
    )


def with_files(owner: User) -> tuple[Conversation, list[StoredFile]]:
    """A conversation whose first message carries a picture and a table, and whose third
    carries the table again and some notes; the second carries nothing."""
    picture = file_make(owner, PNG, "holiday [1].png")
    table = file_make(owner, CSV, "rain.csv")
    notes = file_make(owner, NOTES, "notes.md")
    conversation = services.conversation_create(owner=owner, title="Trip")
    services.user_message_append(
        conversation=conversation,
        content="Look at these.",
        attachments=[str(picture.pk), str(table.pk)],
    )
    services.user_message_append(conversation=conversation, content="No files here.")
    services.user_message_append(
        conversation=conversation,
        content="And these.",
        attachments=[str(table.pk), str(notes.pk)],
    )
    return conversation, [picture, table, notes]


def bundle_with(document: dict[str, Any], files: dict[str, bytes]) -> bytes:
    """A ZIP holding `document` as conversation.json and each of `files` under its name."""
    return zip_of({"conversation.json": json.dumps(document).encode(), **files})


def zip_exported(client: Any, conversation: Conversation) -> bytes:
    """The conversation's ZIP export, as `client` downloads it."""
    response = zip_export(client, conversation)
    assert response.status_code == 200, response.content
    return body_of(response)


def zip_parts(client: Any, conversation: Conversation) -> tuple[dict[str, Any], dict[str, bytes]]:
    """The ZIP export's document, and its other entries by name."""
    entries = zip_entries(zip_exported(client, conversation))
    document = json.loads(entries.pop("conversation.json"))
    return document, entries


def attachments_shown(client: Any, conversation_id: str) -> list[list[dict[str, Any]]]:
    """Each message's attachments, as the API shows them."""
    page = client.get(f"/api/v1/conversations/{conversation_id}/messages/").json()["results"]
    return [message["attachments"] for message in page]


def file_content(client: Any, file_id: str) -> bytes:
    response = client.get(f"/api/v1/files/{file_id}/content")
    assert response.status_code == 200
    return body_of(response)


def nothing_stored_for(user: User) -> None:
    """No conversation (not even a hidden one), file or stored bytes of `user`."""
    assert not Conversation.with_imports.filter(owner=user).exists()
    assert not StoredFile.objects.filter(owner=user).exists()
    assert not [name for name in stored_names() if name.startswith(f"files/{user.pk}/")]
