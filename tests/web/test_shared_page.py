"""The shared page `/s/<token>/`: the snapshot read-only for whoever holds the link,
nothing of the owner, noindex; a closed link is the same 404 page as an unknown one. The
messages come with the page as JSON, drawn by the chat's modules (test_share_links.py
shows them drawn)."""

import json
import re
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from conversations import services
from conversations.models import Conversation, Share
from conversations.services import NewMessage
from tests.support.files import file_make
from tests.support.shares import SECRET_DRAFT, SECRET_PROMPT, chat_to_share

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("fresh_throttles")]


@pytest.fixture
def chat(owner) -> Conversation:
    return chat_to_share(owner, question="Why do cats <b>purr</b>?")


def link(chat: Conversation, audience: str = "public") -> str:
    _, token = services.share_create(conversation=chat, user=chat.owner, audience=audience)
    return f"/s/{token}/"


def snapshot(page: str) -> list[dict[str, Any]]:
    """The messages the page carries for its modules to draw."""
    found = re.search(r'<script id="shared-messages" type="application/json">(.*?)</script>', page)
    assert found is not None
    messages: list[dict[str, Any]] = json.loads(found.group(1))
    return messages


def test_anyone_reads_the_transcript_and_nothing_of_the_owner(chat, owner):
    owner.email = "alice@example.com"
    owner.save()
    url = link(chat)
    services.message_append(conversation=chat, message=NewMessage(role="user", content="Later"))

    response = Client().get(url)

    assert response.status_code == 200
    page = response.content.decode()
    assert [m["content"] for m in snapshot(page)] == [
        "Why do cats <b>purr</b>?",
        "Mostly contentment.",
    ]
    assert "<b>purr" not in page  # data for the modules, never markup in the page
    assert "Later" not in page
    for secret in (owner.username, owner.email, SECRET_PROMPT, SECRET_DRAFT, str(chat.pk)):
        assert secret not in page
    assert Share.objects.get().view_count == 1
    assert 'type="module" src="/static/web/shared.js"' in page


def test_files_are_named_and_tool_calls_carried_for_the_cards(chat, owner):
    file = file_make(owner, b"col\n1\n", name="numbers.csv")
    services.messages_append(
        conversation=chat,
        messages=[
            NewMessage(role="user", content="Sum this", attachments=(file.pk,)),
            NewMessage(
                role="assistant",
                tool_calls=[{"id": "call_1", "name": "calculator", "arguments": '{"x": 1}'}],
            ),
            NewMessage(role="tool", tool_call_id="call_1", name="calculator", content="1"),
            NewMessage(role="assistant", content="**One.**", reasoning="Easy.", reasoning_ms=900),
        ],
    )

    messages = snapshot(Client().get(link(chat)).content.decode())

    assert [f["filename"] for f in messages[2]["attachments"]] == ["numbers.csv"]
    assert messages[3]["tool_calls"][0]["name"] == "calculator"
    assert (messages[4]["tool_call_id"], messages[4]["content"]) == ("call_1", "1")
    assert (messages[5]["content"], messages[5]["reasoning"]) == ("**One.**", "Easy.")


def test_a_long_snapshot_costs_as_many_queries_as_a_short_one(chat):
    short = link(chat)
    services.messages_append(
        conversation=chat,
        messages=[NewMessage(role="user", content=f"Message {n}") for n in range(300)],
    )
    long = link(chat)

    counts = []
    for url in (short, long):
        with CaptureQueriesContext(connection) as queries:
            assert Client().get(url).status_code == 200
        counts.append(len(queries))

    assert counts[0] == counts[1]


def test_a_signed_in_reader_may_continue_and_an_anonymous_one_is_asked_to_log_in(chat, outsider):
    url = link(chat)
    reader = Client()
    reader.force_login(outsider)

    signed_in = reader.get(url).content.decode()
    anonymous = Client().get(url).content.decode()

    assert "Continue in my account" in signed_in
    assert f'data-url="/api/v1/shared/{url.split("/")[2]}/continue/"' in signed_in
    assert outsider.username not in signed_in  # the page names nobody, the reader neither
    assert "csrftoken" in reader.cookies
    assert "Continue in my account" not in anonymous
    assert f'href="/accounts/login/?next={url}"' in anonymous


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
