"""The admin's exports of many conversations, with branches: the JSON ZIP carries every
branch and re-imports to the same tree, Markdown and JSONL show the active path only,
and the CSV lists every message with its branch."""

import csv
import io
import json
import zipfile

import pytest
from django.db import connection
from django.http import StreamingHttpResponse
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from accounts.models import User
from conversations import services
from conversations.formats import archives, exporting
from conversations.models import Conversation, Message
from tests.support.admin import SECRET, chat, client_for
from tests.support.admin_branches import NEW_REPLY, OLD_REPLY, regenerated, tree
from tests.support.documents import branch_ids_relabelled

pytestmark = pytest.mark.django_db

CHANGELIST = reverse("admin:conversations_conversation_changelist")


def exported(user: User, action: str, conversations: list[Conversation]) -> bytes:
    response = client_for(user).post(
        CHANGELIST,
        {"action": action, "_selected_action": [str(c.pk) for c in conversations], "index": "0"},
    )
    assert response.status_code == 200
    assert isinstance(response, StreamingHttpResponse)
    return b"".join(response)


def without_ids(document: dict) -> dict:
    """The document as two exports of one tree share it: ids (of the conversation, its
    messages, their runs and its branches) and the export time left out."""
    document = branch_ids_relabelled(document)
    document.pop("exported_at")
    document["conversation"].pop("id")
    for message in document["messages"]:
        message.pop("id")
        message.pop("run_id")
    return document


def test_json_zip_carries_every_branch_and_reimports_to_the_same_tree(reader, owner):
    made = regenerated(owner)
    deep, branches = tree(owner)
    single = chat(owner, "single")
    originals = [made.conversation, deep, single]
    archive = zipfile.ZipFile(io.BytesIO(exported(reader, "export_json_zip", originals)))
    importer = User.objects.create_user(username="importer")
    for original in originals:
        document = json.loads(archive.read(f"{original.pk}.json"))
        assert document["version"] == 2
        assert len(document["branches"]) == original.branch_count
        assert len(document["messages"]) == original.message_count  # every branch's
        assert document["conversation"]["active_branch_id"] == str(original.active_branch_id)
        copy = services.conversation_import(owner=importer, document=json.dumps(document))
        assert copy.branch_count == original.branch_count
        assert without_ids(exporting.export_json(copy)) == without_ids(
            exporting.export_json(original)
        )
    assert {row["id"] for row in json.loads(archive.read(f"{deep.pk}.json"))["branches"]} == {
        str(branch.pk) for branch in branches
    }


def test_jsonl_has_the_active_path_only(reader, owner):
    made = regenerated(owner)
    deep, _ = tree(owner)
    single = chat(owner, "single")
    selection = [made.conversation, deep, single]
    lines = exported(reader, "export_jsonl", selection).decode().splitlines()
    contents = sorted([m["content"] for m in json.loads(line)["messages"]] for line in lines)
    assert contents == sorted(
        [
            ["Be kind.", f"{SECRET} #0", "Noted, turn 0.", f"{SECRET} #1", NEW_REPLY],
            ["Hi.", "u1", "a2", "u3'", "a4'", "u5'''"],
            ["Be kind.", f"{SECRET} #0", "Noted, turn 0.", f"{SECRET} #1", OLD_REPLY],
        ]
    )
    # Each line is what the one-conversation export (which reads the path) writes.
    expected = sorted(exporting.export_jsonl_lines(selection))
    assert sorted(line + "\n" for line in lines) == expected


def test_jsonl_queries_do_not_grow_with_branched_conversations(owner):
    def queries(count: int) -> tuple[int, int]:
        Conversation.objects.all().delete()
        for index in range(count):
            regenerated(owner, f"r{index}")
            tree(owner, f"t{index}")
            chat(owner, f"c{index}")
        with CaptureQueriesContext(connection) as captured:
            lines = b"".join(archives.jsonl_stream(Conversation.objects.all())).splitlines()
        return len(lines), len(captured.captured_queries)

    few_lines, few = queries(1)
    many_lines, many = queries(8)
    assert (few_lines, many_lines) == (3, 24)
    assert many == few


def test_markdown_has_the_active_path_with_the_other_versions_noted(reader, owner):
    made = regenerated(owner)
    deep, _ = tree(owner)
    archive = zipfile.ZipFile(
        io.BytesIO(exported(reader, "export_markdown_zip", [made.conversation, deep]))
    )
    text = archive.read(f"{made.conversation.pk}.md").decode()
    assert "- Messages: 4" in text  # the path's length, not the 5 messages stored
    assert NEW_REPLY in text
    assert text.count("### Assistant") == 2
    # The replaced reply is only named in the note on its alternative.
    for line in text.splitlines():
        if OLD_REPLY in line:
            assert line.startswith("> - 1 (branch"), line
    assert "Version 2 of 2" in text
    messages = [
        block.split("\n\n", 1)[1].strip()
        for block in archive.read(f"{deep.pk}.md").decode().split("### ")[1:]
    ]
    assert [m.split("\n\n")[0] for m in messages] == ["u1", "a2", "u3'", "a4'", "u5'''"]


def test_csv_lists_every_message_with_its_branch(reader, owner):
    made = regenerated(owner)
    single = chat(owner, "single")
    rows = list(
        csv.DictReader(
            io.StringIO(
                exported(reader, "export_csv", [made.conversation, single]).decode(), newline=""
            )
        )
    )
    assert list(rows[0])[:5] == [
        "conversation_id",
        "conversation_title",
        "owner_id",
        "branch_id",
        "seq",
    ]
    mine = [row for row in rows if row["conversation_id"] == str(made.conversation.pk)]
    # The root's messages first, then the branch's own: every message stored, once.
    assert [(row["branch_id"], row["seq"], row["content"]) for row in mine] == [
        (str(made.root.pk), "1", f"{SECRET} #0"),
        (str(made.root.pk), "2", "Noted, turn 0."),
        (str(made.root.pk), "3", f"{SECRET} #1"),
        (str(made.root.pk), "4", OLD_REPLY),
        (str(made.branch.pk), "4", NEW_REPLY),
    ]
    others = [row for row in rows if row["conversation_id"] == str(single.pk)]
    root = single.active_branch_id
    assert [(row["branch_id"], row["seq"]) for row in others] == [
        (str(root), str(seq)) for seq in range(1, 5)
    ]
    assert len(rows) == Message.objects.count()
