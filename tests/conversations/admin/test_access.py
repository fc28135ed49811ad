"""Who sees what: non-staff, staff without the permission, moderators (metadata only) and
readers (transcripts, audited), on every admin page."""

import pytest
from django.urls import reverse

from conversations.models import AuditEvent, Message, Run
from tests.support.admin import SECRET, chat, client_for, long_chat

pytestmark = pytest.mark.django_db

CHANGELIST = reverse("admin:conversations_conversation_changelist")


def transcript_url(conversation) -> str:
    return reverse("admin:conversations_conversation_transcript", args=[conversation.pk])


def pages(conversation) -> dict[str, str]:
    message = conversation.messages.first()
    return {
        "conversation list": CHANGELIST,
        "conversation detail": reverse(
            "admin:conversations_conversation_change", args=[conversation.pk]
        ),
        "message list": reverse("admin:conversations_message_changelist"),
        "message detail": reverse("admin:conversations_message_change", args=[message.pk]),
        "usage": reverse("admin:conversations_conversation_usage"),
    }


def test_non_staff_is_sent_to_the_login_page_everywhere(owner, baking):
    client = client_for(owner)
    for name, url in [*pages(baking).items(), ("transcript", transcript_url(baking))]:
        response = client.get(url)
        assert response.status_code == 302, name
        assert "/login/" in response["Location"], name


def test_staff_without_the_model_permission_is_refused(plain_staff, baking):
    client = client_for(plain_staff)
    for name, url in [*pages(baking).items(), ("transcript", transcript_url(baking))]:
        assert client.get(url).status_code == 403, name
    assert not AuditEvent.objects.exists()


def test_moderator_sees_metadata_everywhere_but_never_message_text(moderator, baking):
    client = client_for(moderator)
    for name, url in pages(baking).items():
        response = client.get(url)
        assert response.status_code == 200, name
        body = response.content.decode()
        assert SECRET not in body, name
        assert "Be kind." not in body, name  # the system prompt is text too
    listing = client.get(CHANGELIST).content.decode()
    # Titles are made from the first message: they count as text.
    assert "Baking" not in listing
    assert f"untitled (4 messages) · {str(baking.pk)[:8]}" in listing
    assert "alice" in listing
    assert "transcript" not in client.get(pages(baking)["conversation detail"]).content.decode()
    assert not AuditEvent.objects.exists()


def test_moderator_cannot_open_a_transcript_and_nothing_is_audited(moderator, baking):
    assert client_for(moderator).get(transcript_url(baking)).status_code == 403
    assert not AuditEvent.objects.exists()


def test_moderator_text_search_on_messages_finds_nothing(moderator, baking):
    url = reverse("admin:conversations_message_changelist")
    response = client_for(moderator).get(url, {"q": "eggs"})
    assert response.status_code == 200
    assert response.context["cl"].result_count == 0


def test_reader_reads_the_transcript_and_each_page_is_audited(reader, baking, owner):
    response = client_for(reader).get(transcript_url(baking))
    assert response.status_code == 200
    body = response.content.decode()
    assert f"{SECRET} #0" in body
    assert "Noted, turn 1." in body
    assert "Be kind." in body
    event = AuditEvent.objects.get()
    assert event.action == AuditEvent.Action.VIEWED
    assert event.actor == reader
    assert event.actor_username == "reader"
    assert event.conversation_id == baking.pk
    assert event.owner_id == owner.pk
    # The branch read is named whole, so a reviewer knows which version of the chat it was.
    assert event.reason == f"transcript page 1 of 1, branch {baking.active_branch_id} (active)"


def test_transcript_of_a_long_conversation_is_paginated(reader, owner):
    conversation = long_chat(owner, 250)
    client = client_for(reader)
    first = client.get(transcript_url(conversation))
    assert [m.seq for m in first.context["page"].messages] == list(range(1, 101))
    assert "page 1 of 3" in first.content.decode()
    last = client.get(transcript_url(conversation), {"page": 3})
    assert [m.seq for m in last.context["page"].messages] == list(range(201, 251))
    beyond = client.get(transcript_url(conversation), {"page": 99})
    assert beyond.context["page"].number == 3
    assert AuditEvent.objects.filter(action="viewed").count() == 3


def test_transcript_shows_tool_calls_events_and_links_to_runs(reader, superuser, owner):
    from conversations import services
    from conversations.services import NewMessage

    conversation = chat(owner, turns=1)
    run = Run.objects.create(conversation=conversation, status=Run.Status.COMPLETED)
    services.messages_append(
        conversation=conversation,
        messages=[
            NewMessage(
                role="assistant",
                tool_calls=[{"id": "call_9", "name": "calculator", "arguments": '{"x": 1}'}],
                run_id=run.pk,
            ),
            NewMessage(role="tool", tool_call_id="call_9", name="calculator", content="42"),
            NewMessage(role="system", kind="event", content="user opened the settings"),
        ],
    )
    body = client_for(superuser).get(transcript_url(conversation)).content.decode()
    assert "calculator" in body
    assert "{&quot;x&quot;: 1}" in body
    assert "answers call_9" in body
    assert "user opened the settings" in body
    assert reverse("admin:conversations_run_change", args=[run.pk]) in body


def test_transcript_of_an_unknown_conversation_is_404(reader):
    import uuid

    url = reverse("admin:conversations_conversation_transcript", args=[uuid.uuid4()])
    assert client_for(reader).get(url).status_code == 404


def test_reader_sees_message_text_in_the_message_admin_audited(reader, baking):
    message = baking.messages.get(seq=1)
    url = reverse("admin:conversations_message_change", args=[message.pk])
    body = client_for(reader).get(url).content.decode()
    assert f"{SECRET} #0" in body
    event = AuditEvent.objects.get()
    assert (event.action, event.reason) == ("viewed", "message #1")
    assert event.conversation_id == baking.pk


def test_reader_searches_message_content(reader, baking, owner):
    chat(owner, title="Other").messages.filter(role="user").update(content="nothing here")
    url = reverse("admin:conversations_message_changelist")
    found = client_for(reader).get(url, {"q": "recipe"}).context["cl"].result_list
    assert {m.conversation_id for m in found} == {baking.pk}
    assert all(m.role == "user" for m in found)
    assert len(found) == 2


def test_message_list_never_shows_text_even_to_readers(reader, baking):
    url = reverse("admin:conversations_message_changelist")
    body = client_for(reader).get(url).content.decode()
    assert SECRET not in body
    assert not AuditEvent.objects.exists()


def test_messages_runs_and_audit_events_cannot_be_added_changed_or_deleted(superuser, baking):
    from conversations import services

    services.audit_record(actor=superuser, action="viewed", conversation=baking)
    client = client_for(superuser)
    message = Message.objects.filter(conversation=baking).earliest("seq")
    event = AuditEvent.objects.get()
    for model, obj in [("message", message), ("auditevent", event)]:
        assert client.get(reverse(f"admin:conversations_{model}_add")).status_code == 403
        delete = reverse(f"admin:conversations_{model}_delete", args=[obj.pk])
        assert client.post(delete, {"post": "yes"}).status_code == 403
        change = reverse(f"admin:conversations_{model}_change", args=[obj.pk])
        client.post(change, {"reason": "rewritten", "content": "rewritten"})
    assert AuditEvent.objects.get().reason == ""
    assert Message.objects.filter(content="rewritten").count() == 0
    listing = client.get(reverse("admin:conversations_auditevent_changelist"))
    assert "delete_selected" not in listing.content.decode()


def test_audit_events_are_listed_for_moderators(moderator, reader, baking):
    client_for(reader).get(transcript_url(baking))
    response = client_for(moderator).get(reverse("admin:conversations_auditevent_changelist"))
    assert response.status_code == 200
    assert "reader" in response.content.decode()
