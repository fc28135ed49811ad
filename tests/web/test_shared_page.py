"""The shared page `/s/<token>/`: the snapshot read-only for whoever holds the link,
nothing of the owner, noindex; a closed link is the same 404 page as an unknown one."""

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from conversations import services
from conversations.models import Conversation, Share
from conversations.services import NewMessage

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("fresh_throttles")]

SECRET_PROMPT = "Owner's secret system prompt"
SECRET_DRAFT = "owner's unsent draft"


@pytest.fixture
def chat(owner) -> Conversation:
    conversation = services.conversation_create(
        owner=owner, title="Cats", system_prompt=SECRET_PROMPT
    )
    services.messages_append(
        conversation=conversation,
        messages=[
            NewMessage(role="user", content="Why do cats <b>purr</b>?"),
            NewMessage(role="assistant", content="Mostly contentment."),
        ],
    )
    services.conversation_draft_update(conversation=conversation, draft=SECRET_DRAFT)
    conversation.refresh_from_db()
    return conversation


def link(chat: Conversation, audience: str = "public") -> str:
    _, token = services.share_create(conversation=chat, user=chat.owner, audience=audience)
    return f"/s/{token}/"


def test_anyone_reads_the_transcript_and_nothing_of_the_owner(chat, owner):
    owner.email = "alice@example.com"
    owner.save()
    url = link(chat)
    services.message_append(conversation=chat, message=NewMessage(role="user", content="Later"))

    response = Client().get(url)

    assert response.status_code == 200
    page = response.content.decode()
    assert "Mostly contentment." in page
    assert "Why do cats &lt;b&gt;purr&lt;/b&gt;?" in page  # shown as text, never as markup
    assert "Later" not in page
    for secret in (owner.username, owner.email, SECRET_PROMPT, SECRET_DRAFT):
        assert secret not in page
    assert Share.objects.get().view_count == 1


def test_the_page_is_kept_out_of_search_engines_under_the_apps_csp(chat):
    response = Client().get(link(chat))

    assert response["X-Robots-Tag"] == "noindex"
    assert '<meta name="robots" content="noindex">' in response.content.decode()
    assert "script-src 'self'" in response["Content-Security-Policy"]


def test_revoked_expired_and_unknown_links_show_the_same_404_page(chat):
    revoked, expired = link(chat), link(chat)
    first, second = Share.objects.order_by("created_at")
    services.share_revoke(share=first)
    Share.objects.filter(pk=second.pk).update(expires_at=timezone.now() - timedelta(seconds=1))

    answers = [Client().get(url) for url in (revoked, expired, "/s/no-such-token/")]

    assert [a.status_code for a in answers] == [404, 404, 404]
    assert len({a.content for a in answers}) == 1
    assert answers[0]["X-Robots-Tag"] == "noindex"


def test_a_signed_in_link_sends_anonymous_readers_to_log_in(chat, outsider):
    url = link(chat, audience="signed_in")
    signed_in = Client()
    signed_in.force_login(outsider)

    anonymous = Client().get(url)

    assert anonymous.status_code == 302
    assert anonymous["Location"].startswith("/accounts/login/?next=/s/")
    assert signed_in.get(url).status_code == 200
    assert Share.objects.get().view_count == 1
