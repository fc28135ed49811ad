"""Bulk actions on the conversation list: flag, unflag, delete, exports."""

import csv
import io
import json
import zipfile

import pytest
from django.urls import reverse

from accounts.models import User
from conversations import services
from conversations.formats import exporting
from conversations.models import AuditEvent, Conversation, Message, Run
from conversations.services import NewMessage
from tests.support.admin import SECRET, chat, client_for, long_chat, staff
from tests.support.documents import branch_ids_relabelled

pytestmark = pytest.mark.django_db

CHANGELIST = reverse("admin:conversations_conversation_changelist")


def act(client, action: str, conversations, **extra):
    data = {"action": action, "_selected_action": [str(c.pk) for c in conversations], **extra}
    if "apply" not in extra:
        data["index"] = "0"
    return client.post(CHANGELIST, data)


def streamed(response) -> bytes:
    assert response.status_code == 200
    return b"".join(response.streaming_content)


# --- flag / unflag ---------------------------------------------------------------------


def test_flag_asks_for_a_reason_then_flags_and_audits(moderator, owner):
    first, second, untouched = chat(owner, "one"), chat(owner, "two"), chat(owner, "three")
    client = client_for(moderator)

    page = act(client, "flag", [first, second])
    assert page.status_code == 200
    assert "2 conversations selected" in page.content.decode()
    assert not Conversation.objects.filter(flagged=True).exists()

    done = act(client, "flag", [first, second], apply="yes", reason="harassment report #12")
    assert done.status_code == 302
    flagged = Conversation.objects.filter(flagged=True)
    assert set(flagged) == {first, second}
    assert set(flagged.values_list("flag_reason", flat=True)) == {"harassment report #12"}
    events = AuditEvent.objects.filter(action="flagged")
    assert {e.conversation_id for e in events} == {first.pk, second.pk}
    assert {(e.actor_username, e.owner_id, e.reason) for e in events} == {
        ("moderator", owner.pk, "harassment report #12")
    }
    assert not Conversation.objects.get(pk=untouched.pk).flagged


def test_flag_without_a_reason_is_refused_and_changes_nothing(moderator, baking):
    page = act(client_for(moderator), "flag", [baking], apply="yes", reason="  ")
    assert page.status_code == 200
    assert "This field is required" in page.content.decode()
    assert not Conversation.objects.get(pk=baking.pk).flagged
    assert not AuditEvent.objects.exists()


def test_unflag_clears_the_flag_and_audits(moderator, baking):
    Conversation.objects.filter(pk=baking.pk).update(flagged=True, flag_reason="spam")
    act(client_for(moderator), "unflag", [baking], apply="yes", reason="false alarm")
    baking.refresh_from_db()
    assert (baking.flagged, baking.flag_reason) == (False, "")
    event = AuditEvent.objects.get()
    assert (event.action, event.reason) == ("unflagged", "false alarm")


def test_flag_across_all_results_of_a_filter(moderator, owner, outsider):
    mine = [chat(owner, f"mine {i}", turns=0) for i in range(3)]
    theirs = chat(outsider, "theirs", turns=0)
    client = client_for(moderator)
    url = f"{CHANGELIST}?owner={owner.pk}"
    response = client.post(
        url,
        {
            "action": "flag",
            "select_across": "1",
            "_selected_action": [str(mine[0].pk)],
            "apply": "yes",
            "reason": "bulk",
        },
    )
    assert response.status_code == 302
    assert set(Conversation.objects.filter(flagged=True)) == set(mine)
    assert not Conversation.objects.get(pk=theirs.pk).flagged


def test_staff_without_change_permission_cannot_flag(owner, baking):
    viewer = staff("viewer", "view_conversation")
    act(client_for(viewer), "flag", [baking], apply="yes", reason="x")
    assert not Conversation.objects.get(pk=baking.pk).flagged
    assert not AuditEvent.objects.exists()


# --- delete ----------------------------------------------------------------------------


def test_delete_confirmation_shows_counts_not_rows(moderator, owner, outsider):
    big = long_chat(owner, 300)
    small = chat(outsider)
    Run.objects.create(conversation=big, status=Run.Status.COMPLETED)
    page = act(client_for(moderator), "delete_selected", [big, small])
    assert page.status_code == 200
    assert page.context["count"] == 2
    assert page.context["messages_count"] == 304
    assert page.context["runs_count"] == 1
    assert page.context["owners_count"] == 2
    body = page.content.decode()
    assert "line 17" not in body  # no rows listed
    assert Conversation.objects.count() == 2


def test_delete_removes_everything_with_no_orphans_and_audits(moderator, owner):
    doomed = long_chat(owner, 2000)
    run = Run.objects.create(conversation=doomed, status=Run.Status.COMPLETED)
    Message.objects.filter(conversation=doomed, seq=5).update(run=run)
    fork = services.conversation_fork(conversation=doomed, at_seq=10)
    kept = chat(owner, "kept")

    response = act(
        client_for(moderator), "delete_selected", [doomed], apply="yes", reason="user request"
    )
    assert response.status_code == 302
    assert set(Conversation.objects.all()) == {fork, kept}
    assert not Message.objects.filter(conversation_id=doomed.pk).exists()
    assert not Run.objects.filter(conversation_id=doomed.pk).exists()
    # No message points to a run that is gone, no run to a message that is gone.
    assert not Message.objects.filter(run__isnull=False).exclude(run__in=Run.objects.all())
    assert Conversation.objects.get(pk=fork.pk).forked_from is None
    assert Message.objects.filter(conversation=fork).count() == 10
    event = AuditEvent.objects.get(action="deleted")
    assert (event.conversation_id, event.owner_id, event.reason) == (
        doomed.pk,
        owner.pk,
        "user request",
    )


def test_delete_of_many_messages_is_one_statement_per_table(owner, moderator):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    conversations = [long_chat(owner, 500) for _ in range(3)]
    with CaptureQueriesContext(connection) as captured:
        services.conversations_delete(
            actor=moderator, queryset=Conversation.objects.filter(owner=owner)
        )
    deletes = [q["sql"] for q in captured.captured_queries if q["sql"].startswith("DELETE")]
    # messages, attachments, branches, runs, share links, tags, conversations
    assert len(deletes) == 7
    assert not Conversation.objects.filter(pk__in=[c.pk for c in conversations]).exists()
    assert not Message.objects.exists()


def test_moderator_without_delete_permission_cannot_delete(owner, baking):
    viewer = staff("viewer2", "view_conversation", "change_conversation")
    act(client_for(viewer), "delete_selected", [baking], apply="yes")
    assert Conversation.objects.filter(pk=baking.pk).exists()


def test_detail_page_delete_uses_counts_and_the_audited_path(superuser, baking):
    url = reverse("admin:conversations_conversation_delete", args=[baking.pk])
    client = client_for(superuser)
    page = client.get(url)
    assert page.status_code == 200
    assert SECRET not in page.content.decode()
    client.post(url, {"post": "yes"})
    assert not Conversation.objects.exists()
    assert not Message.objects.exists()
    assert AuditEvent.objects.get().action == "deleted"


# --- exports ---------------------------------------------------------------------------


def worked(owner: User, title: str) -> Conversation:
    conversation = chat(owner, title)
    services.messages_append(
        conversation=conversation,
        messages=[
            NewMessage(
                role="assistant",
                tool_calls=[{"id": "c1", "name": "calculator", "arguments": '{"e": "1+1"}'}],
            ),
            NewMessage(role="tool", tool_call_id="c1", name="calculator", content="2"),
            NewMessage(role="system", kind="event", content="user switched tabs"),
        ],
    )
    return conversation


def without_ids(document: dict) -> dict:
    document = branch_ids_relabelled(json.loads(json.dumps(document)))
    document.pop("exported_at")
    document["conversation"].pop("id")
    for message in document["messages"]:
        message.pop("id")
    return document


def test_json_zip_reimports_to_identical_conversations(reader, owner, outsider):
    originals = [worked(owner, "first"), worked(outsider, "second"), long_chat(owner, 150)]
    response = act(client_for(reader), "export_json_zip", originals)
    assert response["Content-Type"] == "application/zip"
    archive = zipfile.ZipFile(io.BytesIO(streamed(response)))
    assert sorted(archive.namelist()) == sorted(f"{c.pk}.json" for c in originals)

    importer = User.objects.create_user(username="importer")
    for original in originals:
        document = archive.read(f"{original.pk}.json")
        copy = services.conversation_import(owner=importer, document=document)
        assert without_ids(exporting.export_json(copy)) == without_ids(
            exporting.export_json(original)
        )
    exported = AuditEvent.objects.filter(action="exported")
    assert {e.conversation_id for e in exported} == {c.pk for c in originals}
    assert {e.reason for e in exported} == {"format: json"}


def test_jsonl_export_has_one_line_per_conversation_in_chat_format(reader, owner):
    conversations = [worked(owner, "a"), chat(owner, "b")]
    response = act(client_for(reader), "export_jsonl", conversations)
    lines = streamed(response).decode().splitlines()
    assert len(lines) == 2
    expected = sorted(exporting.export_jsonl_lines(conversations))
    assert sorted(line + "\n" for line in lines) == expected
    first = json.loads(expected[0])["messages"]
    assert first[0] == {"role": "system", "content": "Be kind."}


def test_markdown_zip_has_one_transcript_per_conversation(reader, owner):
    conversation = worked(owner, "Recipes")
    response = act(client_for(reader), "export_markdown_zip", [conversation])
    archive = zipfile.ZipFile(io.BytesIO(streamed(response)))
    text = archive.read(f"{conversation.pk}.md").decode()
    assert text.startswith("# Recipes")
    assert f"{SECRET} #1" in text
    assert AuditEvent.objects.get().reason == "format: markdown"


def test_csv_export_escapes_commas_quotes_and_newlines(reader, owner):
    conversation = services.conversation_create(owner=owner, title='Quotes, "and" more')
    tricky = 'one, two\n"three"\r\nfour,"five"'
    services.user_message_append(conversation=conversation, content=tricky)
    response = act(client_for(reader), "export_csv", [conversation])
    assert response["Content-Type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(streamed(response).decode(), newline="")))
    assert len(rows) == 1
    assert rows[0]["content"] == tricky
    assert rows[0]["conversation_title"] == 'Quotes, "and" more'
    assert rows[0]["conversation_id"] == str(conversation.pk)
    assert rows[0]["seq"] == "1"


def test_csv_export_neutralises_spreadsheet_formulas(reader, owner):
    conversation = services.conversation_create(owner=owner, title="=HYPERLINK(1)")
    services.user_message_append(conversation=conversation, content='=cmd|" /C calc"!A0')
    services.user_message_append(conversation=conversation, content="- a plain list item")
    services.user_message_append(conversation=conversation, content="2 + 2 = 4")
    response = act(client_for(reader), "export_csv", [conversation])
    rows = list(csv.DictReader(io.StringIO(streamed(response).decode(), newline="")))
    assert [row["content"] for row in rows] == [
        '\'=cmd|" /C calc"!A0',
        "'- a plain list item",
        "2 + 2 = 4",
    ]
    assert rows[0]["conversation_title"] == "'=HYPERLINK(1)"


def test_exports_need_the_transcript_permission(moderator, baking):
    client = client_for(moderator)
    for action in ["export_json_zip", "export_jsonl", "export_markdown_zip", "export_csv"]:
        response = act(client, action, [baking])
        assert not getattr(response, "streaming", False), action
        assert SECRET.encode() not in response.content
    assert not AuditEvent.objects.exists()


def test_csv_export_neutralises_formulas_in_every_column(reader, owner):
    conversation = services.conversation_create(owner=owner, title=" =HYPERLINK(1)")
    services.messages_append(
        conversation=conversation,
        messages=[
            NewMessage(
                role="assistant",
                content="",
                tool_calls=[{"id": "+call", "name": "=evil", "arguments": "{}"}],
            ),
            NewMessage(role="tool", content="\t=1+1", tool_call_id="+call", name="@SUM(A1)"),
        ],
    )
    # Values no service would write, as an old import might have left them.
    Message.objects.filter(conversation=conversation).update(usage={"total_tokens": "=2+3"})
    response = act(client_for(reader), "export_csv", [conversation])
    rows = list(csv.DictReader(io.StringIO(streamed(response).decode(), newline="")))
    risky = ("=", "+", "-", "@", "\t", "\r", "|", "%", "\uff1d", " ")
    for row in rows:
        for column, cell in row.items():
            assert not cell.startswith(risky), (column, cell)
    assert rows[1]["name"] == "'@SUM(A1)"
    assert rows[1]["tool_call_id"] == "'+call"
    assert rows[1]["total_tokens"] == "'=2+3"
    assert rows[0]["tool_calls"].startswith("[")  # JSON starts harmlessly
    assert rows[0]["conversation_title"] == "'=HYPERLINK(1)"
    assert rows[1]["content"] == "'\t=1+1"
