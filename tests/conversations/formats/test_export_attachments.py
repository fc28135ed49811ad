"""Files in exports: JSON version 2 lists each message's files (version 1 leaves them out),
at a query per chunk of messages and none for a conversation without files; Markdown
links each file; the admin's ZIP of JSON documents carries them too."""

import json
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from conversations import services
from conversations.formats import archives, exporting
from conversations.models import Conversation
from tests.support.bundles import CSV, NOTES, PNG, sha256_of, with_files, zip_entries

pytestmark = pytest.mark.django_db


def queries(call: Callable[[], Any]) -> tuple[int, Any]:
    with CaptureQueriesContext(connection) as captured:
        result = call()
    return len(captured), result


def test_version_2_lists_each_messages_files_in_order(owner):
    conversation, (picture, table, notes) = with_files(owner)
    messages = exporting.export_json(conversation)["messages"]
    assert [len(m["attachments"]) for m in messages] == [2, 0, 2]
    assert messages[0]["attachments"][0] == {
        "id": str(picture.pk),
        "filename": "holiday [1].png",
        "content_type": "image/png",
        "size": len(PNG),
        "sha256": sha256_of(PNG),
    }
    assert [a["sha256"] for a in messages[2]["attachments"]] == [sha256_of(CSV), sha256_of(NOTES)]
    assert [a["id"] for a in messages[2]["attachments"]] == [str(table.pk), str(notes.pk)]


def test_version_1_leaves_files_out(owner):
    conversation, _ = with_files(owner)
    messages = exporting.export_json(conversation, version=1)["messages"]
    assert all("attachments" not in message for message in messages)


def _messages(owner: Any, count: int, *, files: bool) -> Conversation:
    conversation = services.conversation_create(owner=owner)
    attached = [str(with_files(owner)[1][0].pk)] if files else None
    for turn in range(count):
        services.user_message_append(
            conversation=conversation, content=f"turn {turn}", attachments=attached
        )
    return conversation


def test_files_cost_a_query_per_chunk_and_none_without_files(owner, monkeypatch):
    monkeypatch.setattr(exporting, "READ_CHUNK", 2)
    short, long, attached = (
        _messages(owner, 2, files=False),
        _messages(owner, 8, files=False),
        _messages(owner, 8, files=True),
    )
    count_short, _ = queries(lambda: exporting.export_json(short))
    count_long, _ = queries(lambda: exporting.export_json(long))
    count_attached, document = queries(lambda: exporting.export_json(attached))
    assert count_long == count_short
    assert count_attached == count_long + 4
    assert all(len(m["attachments"]) == 1 for m in document["messages"])


def test_markdown_links_each_file_under_its_message(owner):
    conversation, (picture, table, notes) = with_files(owner)
    markdown = "".join(exporting.export_markdown_chunks(conversation))
    first = markdown.index("Look at these.")
    links = markdown.index("**Attachments**", first)
    assert links < markdown.index("No files here.")
    assert (
        f"- [holiday \\[1\\].png](/api/v1/files/{picture.pk}/content) (image/png, {len(PNG)} bytes)"
        in markdown
    )
    assert f"- [rain.csv](/api/v1/files/{table.pk}/content) (text/csv, {len(CSV)} bytes)" in (
        markdown
    )
    assert markdown.count("**Attachments**") == 2
    assert markdown.count(f"/api/v1/files/{notes.pk}/content") == 1


def test_the_admins_zip_of_documents_lists_the_files(owner):
    conversation, _ = with_files(owner)
    archive = b"".join(archives.json_zip_stream(Conversation.objects.filter(pk=conversation.pk)))
    document = json.loads(zip_entries(archive)[f"{conversation.pk}.json"])
    assert [len(m["attachments"]) for m in document["messages"]] == [2, 0, 2]
