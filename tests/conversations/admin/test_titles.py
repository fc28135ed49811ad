"""Titles are made from the first message: staff without view_transcript see every
conversation as "untitled (n messages)" wherever the admin names it; readers see the
title."""

import pytest
from django.contrib.admin.models import LogEntry
from django.urls import reverse

from accounts.models import User
from conversations.models import Conversation, Run
from tests.support.admin import chat, client_for

pytestmark = pytest.mark.django_db

TITLE = "Hello Toulouse"


@pytest.fixture
def titled(owner: User) -> Conversation:
    conversation = chat(owner, title=TITLE)
    Run.objects.create(
        conversation=conversation,
        status=Run.Status.COMPLETED,
        trigger_message=conversation.messages.get(seq=1),
    )
    return conversation


def neutral(conversation: Conversation) -> str:
    return f"untitled (4 messages) · {str(conversation.pk)[:8]}"


def places(conversation: Conversation) -> dict[str, str]:
    message = conversation.messages.get(seq=1)
    run = Run.objects.get(conversation=conversation)
    autocomplete = reverse("admin:autocomplete")
    return {
        "list": reverse("admin:conversations_conversation_changelist"),
        "detail": reverse("admin:conversations_conversation_change", args=[conversation.pk]),
        "history": reverse("admin:conversations_conversation_history", args=[conversation.pk]),
        "delete": reverse("admin:conversations_conversation_delete", args=[conversation.pk]),
        "message (raw id label)": reverse("admin:conversations_message_change", args=[message.pk]),
        "run (raw id label)": reverse("admin:conversations_run_change", args=[run.pk]),
        "autocomplete": f"{autocomplete}?app_label=conversations&model_name=run"
        "&field_name=conversation&term=alice",
    }


def test_the_label_carries_no_title():
    conversation = Conversation(title=TITLE, message_count=1)
    assert str(conversation) == f"untitled (1 message) · {str(conversation.pk)[:8]}"
    assert TITLE not in str(conversation)
    assert conversation.label(with_title=True) == TITLE
    assert conversation.label(with_title=False) == str(conversation)
    assert Conversation(message_count=2).label(with_title=True).startswith("untitled (2 messages)")


def test_staff_without_the_permission_see_untitled_everywhere(moderator, titled):
    client = client_for(moderator)
    for name, url in places(titled).items():
        response = client.get(url)
        assert response.status_code == 200, name
        body = str(response.json()) if name == "autocomplete" else response.content.decode()
        assert TITLE not in body, name
        assert "Hello" not in body, name
        assert neutral(titled) in body, name


def test_action_pages_and_log_entries_use_the_neutral_label(moderator, titled):
    client = client_for(moderator)
    listing = reverse("admin:conversations_conversation_changelist")
    for action in ("flag", "unflag", "delete_selected"):
        page = client.post(listing, {"action": action, "_selected_action": [str(titled.pk)]})
        assert page.status_code == 200, action
        assert TITLE not in page.content.decode(), action
    delete = reverse("admin:conversations_conversation_delete", args=[titled.pk])
    client.post(delete, {"post": "yes"})
    assert not Conversation.objects.filter(pk=titled.pk).exists()
    entry = LogEntry.objects.get()
    assert entry.object_repr == neutral(titled)
    # The index page's "recent actions" lists it.
    index = client.get(reverse("admin:index")).content.decode()
    assert TITLE not in index
    assert neutral(titled) in index


def test_title_words_find_nothing_and_titles_do_not_sort_for_them(moderator, titled, owner):
    client = client_for(moderator)
    listing = reverse("admin:conversations_conversation_changelist")
    assert list(client.get(listing, {"q": "Toulouse"}).context["cl"].result_list) == []
    by_owner = client.get(listing, {"q": "alice"}).context["cl"].result_list
    assert [c.pk for c in by_owner] == [titled.pk]
    by_id = client.get(listing, {"q": str(titled.pk)}).context["cl"].result_list
    assert [c.pk for c in by_id] == [titled.pk]
    assert client.get(listing, {"title__icontains": "Toulouse"}).status_code == 400


def test_readers_see_the_title_in_the_list_detail_breadcrumbs_and_history(reader, titled):
    client = client_for(reader)
    urls = places(titled)
    listing = client.get(urls["list"]).content.decode()
    assert TITLE in listing
    detail = client.get(urls["detail"]).content.decode()
    assert f"<h2>{TITLE}</h2>" in detail  # the page's subtitle
    assert f"&rsaquo; {TITLE}\n</div>" in detail  # the breadcrumbs
    history = client.get(urls["history"]).content.decode()
    assert f"Change history: {TITLE}" in history
    assert f">{TITLE}</a>" in history
    transcript = reverse("admin:conversations_conversation_transcript", args=[titled.pk])
    assert f">{TITLE}</a>" in client.get(transcript).content.decode()
    found = client.get(urls["list"], {"q": "Toulouse"}).context["cl"].result_list
    assert [c.pk for c in found] == [titled.pk]
