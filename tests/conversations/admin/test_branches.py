"""Branches in the admin: the transcript shows a branch's path with the other versions
marked and opens any branch (each read audited, naming the branch), the list counts
branches without a query per row, and the detail page lists them without message text."""

import re
import uuid

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils.html import escape

from conversations import selectors, services
from conversations.models import AuditEvent, Branch
from conversations.services import NewMessage
from tests.support.admin import SECRET, chat, client_for, long_chat
from tests.support.admin_branches import (
    NEW_REPLY,
    OLD_REPLY,
    change_url,
    regenerated,
    transcript_url,
    tree,
)

pytestmark = pytest.mark.django_db

CHANGELIST = reverse("admin:conversations_conversation_changelist")


def shown_seqs(response) -> list[int]:
    return [message.seq for message in response.context["page"].messages]


def versions(body: str, seq: int) -> str:
    """The "Version i of n" line drawn on the message at `seq`, whitespace squeezed."""
    block = body.split(f'id="seq-{seq}"', 1)[1].split('class="msg', 1)[0]
    found = re.search(r'<div class="versions">(.*?)</div>', block, re.S)
    return " ".join(found.group(1).split()) if found else ""


# --- the transcript --------------------------------------------------------------------


def test_transcript_shows_the_active_path_and_marks_the_regenerated_reply(reader, owner):
    made = regenerated(owner)
    response = client_for(reader).get(transcript_url(made.conversation))
    assert response.status_code == 200
    body = response.content.decode()
    assert shown_seqs(response) == [1, 2, 3, 4]
    assert NEW_REPLY in body
    assert OLD_REPLY not in body  # the other version is a link, not its text
    assert f"{SECRET} #1" in body  # the shared part of the path
    assert response.context["page"].branch == made.branch
    # The new reply is the second of two versions; the first opens the root's path there.
    line = versions(body, 4)
    assert line.startswith("Version 2 of 2:")
    assert f'href="?branch={made.root.pk}&amp;page=1#seq-4"' in line
    assert f"?branch={made.branch.pk}" not in line  # the current one is not a link
    # Messages with a single version are not marked.
    assert [versions(body, seq) for seq in (1, 2, 3)] == ["", "", ""]
    assert "(active: the one the owner sees)" in body
    event = AuditEvent.objects.get()
    assert event.reason == f"transcript page 1 of 1, branch {made.branch.pk} (active)"


def test_opening_another_branch_shows_its_path_and_audits_that_branch(reader, owner):
    made = regenerated(owner)
    response = client_for(reader).get(
        transcript_url(made.conversation), {"branch": str(made.root.pk)}
    )
    assert response.status_code == 200
    body = response.content.decode()
    assert shown_seqs(response) == [1, 2, 3, 4]
    assert OLD_REPLY in body
    assert NEW_REPLY not in body
    line = versions(body, 4)
    assert line.startswith("Version 1 of 2:")
    assert f'href="?branch={made.branch.pk}&amp;page=1#seq-4"' in line
    assert "not active" in body
    event = AuditEvent.objects.get()
    assert (event.action, event.actor, event.conversation_id) == (
        AuditEvent.Action.VIEWED,
        reader,
        made.conversation.pk,
    )
    assert event.reason == f"transcript page 1 of 1, branch {made.root.pk} (not active)"


def test_every_fork_point_of_a_deep_path_is_marked(reader, owner):
    conversation, (root, b1, b2, _) = tree(owner)
    client = client_for(reader)
    body = client.get(transcript_url(conversation)).content.decode()
    for text in ("u1", "a2", "u3'", "a4'", "u5'''"):
        assert f"<pre>{escape(text)}</pre>" in body
    for text in ("u3", "a4", "a2''", "u5'", "a6'"):
        assert f"<pre>{escape(text)}</pre>" not in body
    assert versions(body, 1) == ""
    assert versions(body, 2).startswith("Version 1 of 2:")  # a2, and b2's other reply
    assert f"?branch={b2.pk}&amp;page=1#seq-2" in versions(body, 2)
    assert versions(body, 3).startswith("Version 2 of 2:")  # the edit u3' of u3
    assert f"?branch={root.pk}&amp;page=1#seq-3" in versions(body, 3)
    assert versions(body, 4) == ""
    assert versions(body, 5).startswith("Version 2 of 2:")  # the edit u5''' of u5'
    assert f"?branch={b1.pk}&amp;page=1#seq-5" in versions(body, 5)
    # Following a link shows that branch's path, which has its own versions marked.
    other = client.get(transcript_url(conversation), {"branch": str(b2.pk)})
    assert shown_seqs(other) == [1, 2]
    assert versions(other.content.decode(), 2).startswith("Version 2 of 2:")


def test_a_branch_path_is_paged_by_seq_across_its_segments(reader, owner):
    conversation = long_chat(owner, 150)
    root = Branch.objects.get(conversation=conversation)
    branch = services.branch_fork(conversation=conversation, source=root, fork_seq=120)
    services.messages_append(
        conversation=conversation,
        messages=[NewMessage(role="user", content=f"branch line {i}") for i in range(121, 271)],
        branch_id=branch.pk,
    )
    conversation.refresh_from_db()
    assert conversation.message_count == 300  # both branches' messages
    client = client_for(reader)
    response = client.get(transcript_url(conversation), {"branch": str(branch.pk), "page": "2"})
    # Pages come from the path's length (270), not the conversation's 300 messages.
    assert response.context["page"].pages == 3
    assert shown_seqs(response) == list(range(101, 201))
    texts = [message.content for message in response.context["page"].messages]
    assert texts[:20] == [f"line {i}" for i in range(101, 121)]
    assert texts[20:] == [f"branch line {i}" for i in range(121, 201)]
    body = response.content.decode()
    # Paging on stays on the branch read.
    assert f"?branch={branch.pk}&amp;page=3" in body
    assert f"?branch={branch.pk}&amp;page=1" in body
    # seq 121 is where the branch parted from the root: both versions are marked there.
    assert versions(body, 121).startswith("Version 2 of 2:")
    last = client.get(transcript_url(conversation), {"branch": str(branch.pk), "page": "9"})
    assert shown_seqs(last) == list(range(201, 271))
    root_page = client.get(transcript_url(conversation), {"branch": str(root.pk), "page": "2"})
    assert root_page.context["page"].pages == 2
    assert shown_seqs(root_page) == list(range(101, 151))
    assert [e.reason for e in AuditEvent.objects.order_by("at", "id")] == [
        f"transcript page 2 of 3, branch {branch.pk} (not active)",
        f"transcript page 3 of 3, branch {branch.pk} (not active)",
        f"transcript page 2 of 2, branch {root.pk} (active)",
    ]


def test_transcript_page_count_comes_from_the_branch_path(owner):
    made = regenerated(owner)
    Branch.objects.filter(pk=made.branch.pk).update(message_count=4)
    conversation = made.conversation
    assert conversation.message_count == 5
    page = selectors.transcript_page(conversation=conversation, page=1, per_page=2)
    assert (page.pages, [m.seq for m in page.messages]) == (2, [1, 2])
    last = selectors.transcript_page(conversation=conversation, page=5, per_page=2)
    assert (last.number, [m.content for m in last.messages]) == (2, [f"{SECRET} #1", NEW_REPLY])


@pytest.mark.parametrize("which", ["foreign", "unknown", "garbage"])
def test_a_branch_that_is_not_this_conversations_is_404(reader, owner, outsider, which):
    made = regenerated(owner)
    other = regenerated(outsider, "Theirs")
    branch = {"foreign": other.branch.pk, "unknown": uuid.uuid4(), "garbage": "nope"}[which]
    response = client_for(reader).get(transcript_url(made.conversation), {"branch": str(branch)})
    assert response.status_code == 404
    assert NEW_REPLY.encode() not in response.content
    assert not AuditEvent.objects.exists()


def test_staff_without_view_transcript_cannot_open_any_branch(moderator, owner):
    made = regenerated(owner)
    client = client_for(moderator)
    for branch in (made.root.pk, made.branch.pk, uuid.uuid4()):
        response = client.get(transcript_url(made.conversation), {"branch": str(branch)})
        assert response.status_code == 403
        assert SECRET.encode() not in response.content
    assert not AuditEvent.objects.exists()


# --- the detail page -------------------------------------------------------------------


def test_detail_page_lists_the_branches_and_links_readers_to_each(reader, owner):
    conversation, branches = tree(owner)
    response = client_for(reader).get(change_url(conversation))
    assert response.status_code == 200
    body = response.content.decode()
    assert [row["id"] for row in response.context["branches"]] == [b.pk for b in branches]
    section = body.split('id="branches"', 1)[1].split("</fieldset>", 1)[0]
    assert "Branches (4)" in section
    for branch in branches:
        assert str(branch.pk) in section
        assert f"{transcript_url(conversation)}?branch={branch.pk}" in section
    b3_row = section.split(str(branches[3].pk), 1)[1].split("</tr>", 1)[0]
    assert "active" in b3_row
    assert "after message #4" in b3_row  # forked from b1 after its 4th message
    # path length, then its own messages
    assert re.search(r"<td>5</td>\s*<td>1</td>", b3_row)
    assert not AuditEvent.objects.exists()  # ids and counts are not message text


def test_detail_page_shows_moderators_the_branches_but_no_text_or_transcript_link(moderator, owner):
    made = regenerated(owner)
    response = client_for(moderator).get(change_url(made.conversation))
    assert response.status_code == 200
    body = response.content.decode()
    section = body.split('id="branches"', 1)[1].split("</fieldset>", 1)[0]
    assert str(made.root.pk) in section
    assert str(made.branch.pk) in section
    assert "transcript" not in body
    for text in (SECRET, NEW_REPLY, OLD_REPLY, "Baking", "Be kind."):
        assert text not in body
    assert not AuditEvent.objects.exists()


def test_detail_page_lists_a_bounded_number_of_branches(reader, owner, monkeypatch):
    from conversations.admin import conversations as conversation_admin

    monkeypatch.setattr(conversation_admin, "BRANCHES_SHOWN", 2)
    conversation, branches = tree(owner)
    response = client_for(reader).get(change_url(conversation))
    assert [row["id"] for row in response.context["branches"]] == [b.pk for b in branches[:2]]
    assert "2 more branches not listed." in response.content.decode()


# --- the list --------------------------------------------------------------------------


def test_list_shows_branch_counts(reader, moderator, owner):
    made = regenerated(owner)
    conversation, _ = tree(owner)
    single = chat(owner, "single")
    for user in (reader, moderator):
        response = client_for(user).get(CHANGELIST)
        assert response.status_code == 200
        body = response.content.decode()
        assert "column-branch_count" in body
        counts = {row.pk: row.branch_count for row in response.context["cl"].result_list}
        assert counts == {made.conversation.pk: 2, conversation.pk: 4, single.pk: 1}
        for pk, count in counts.items():
            row = body.split(str(pk)[:8], 1)[1].split("</tr>", 1)[0]
            assert f'<td class="field-branch_count">{count}</td>' in row
        if user == moderator:
            for text in (SECRET, NEW_REPLY, "Baking", "Tree"):
                assert text not in body


def test_list_queries_do_not_grow_with_the_number_of_conversations(reader, owner):
    client = client_for(reader)

    def queries() -> int:
        with CaptureQueriesContext(connection) as captured:
            assert client.get(CHANGELIST).status_code == 200
        return len(captured.captured_queries)

    regenerated(owner, "one")
    chat(owner, "two")
    few = queries()
    for index in range(6):
        regenerated(owner, f"more {index}")
        tree(owner, f"tree {index}")
    assert queries() == few
