"""Share links in the admin: listed without a token or anything of the transcript, by
status and audience; made from the conversation admin by staff who may read transcripts
(the URL shown on that one page), revoked by staff who may change shares; both audited.
The conversation's detail page shows how it is organised, its folder's name only to
those who may read what users wrote."""

import re
from datetime import timedelta

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from accounts.models import User
from conversations import selectors, services
from conversations.admin import text_guard
from conversations.models import AuditEvent, Conversation, ConversationTag, Share
from conversations.services.organising_names import folder_ensure, tags_ensure
from tests.support.admin import MODERATOR_PERMISSIONS, SECRET, client_for, staff

pytestmark = pytest.mark.django_db

SHARES = reverse("admin:conversations_share_changelist")
CONVERSATIONS = reverse("admin:conversations_conversation_changelist")
LINK = re.compile(r"http://testserver/s/([A-Za-z0-9_-]+)/")


@pytest.fixture
def share_viewer(db) -> User:
    return staff("shareviewer", *MODERATOR_PERMISSIONS, "view_share")


@pytest.fixture
def share_keeper(db) -> User:
    """May revoke links, and read no transcript."""
    return staff("sharekeeper", *MODERATOR_PERMISSIONS, "view_share", "change_share")


@pytest.fixture
def share_maker(db) -> User:
    return staff("sharemaker", *MODERATOR_PERMISSIONS, "view_transcript", "add_share", "view_share")


def shared(conversation: Conversation, **fields: object) -> tuple[Share, str]:
    share, token = services.share_create(conversation=conversation, user=conversation.owner)
    if fields:
        Share.objects.filter(pk=share.pk).update(**fields)
    return share, token


def body_of(client: Client, url: str) -> str:
    response = client.get(url)
    assert response.status_code == 200, response.status_code
    return response.content.decode()


def make_links(client: Client, *conversations: Conversation, **form: str) -> str:
    data = {
        "action": "create_share_link",
        "_selected_action": [str(c.pk) for c in conversations],
        "index": "0",
        "apply": "yes",
        "audience": "signed_in",
        "expires": "7",
        **form,
    }
    response = client.post(CONVERSATIONS, data, follow=True)
    assert response.status_code == 200
    return response.content.decode()


def test_the_list_and_detail_show_no_token_and_nothing_written(baking, share_viewer):
    share, token = shared(baking)
    client = client_for(share_viewer)

    for page in (SHARES, reverse("admin:conversations_share_change", args=[share.pk])):
        body = body_of(client, page)
        assert token not in body
        assert share.token_hash not in body
        assert SECRET not in body
        assert "Baking" not in body
        assert str(baking.pk)[:8] in body
        assert "active" in body


def test_the_status_filter_tells_active_expired_and_revoked_apart(baking, share_viewer):
    active, _ = shared(baking)
    expired, _ = shared(baking, expires_at=timezone.now() - timedelta(minutes=1))
    revoked, _ = shared(baking, revoked_at=timezone.now())
    later, _ = shared(baking, expires_at=timezone.now() + timedelta(days=1))
    client = client_for(share_viewer)

    for status, expected in {
        "active": {active, later},
        "expired": {expired},
        "revoked": {revoked},
    }.items():
        body = body_of(client, f"{SHARES}?status={status}")
        shown = {share for share in (active, expired, revoked, later) if str(share.pk)[:8] in body}
        assert shown == expected, status
        assert selectors.share_status(Share.objects.get(pk=next(iter(expected)).pk)) == status
    assert str(active.pk)[:8] not in body_of(client, f"{SHARES}?audience=signed_in")


def test_nobody_filters_or_orders_by_the_token_hash(baking, superuser):
    share, _ = shared(baking)
    client = client_for(superuser)

    for query in (f"?token_hash__startswith={share.token_hash[:2]}", "?token_hash=x"):
        assert client.get(SHARES + query).status_code == 400
    assert share.token_hash not in body_of(client, f"{SHARES}?o=token_hash")


def test_folder_and_tag_names_are_text_and_the_token_hash_a_secret():
    assert text_guard.lookup_touches_text(Conversation, "folder__name__startswith")
    assert text_guard.lookup_touches_text(Conversation, "tags__name")
    assert text_guard.lookup_touches_text(Share, "conversation__folder__name")
    assert not text_guard.lookup_touches_text(Conversation, "pinned")
    assert text_guard.lookup_touches_secret(Share, "token_hash__startswith")


def test_staff_who_may_not_read_text_cannot_filter_by_a_folder_name(owner, moderator):
    conversation = services.conversation_create(owner=owner, title="Filed")
    folder = folder_ensure(owner=owner, name="Private plans")
    Conversation.objects.filter(pk=conversation.pk).update(folder=folder)

    hit = client_for(moderator).get(f"{CONVERSATIONS}?folder__name__startswith=Priv")
    miss = client_for(moderator).get(f"{CONVERSATIONS}?folder__name__startswith=Zzz")

    assert hit.status_code == miss.status_code == 400


def test_a_reader_makes_a_link_for_the_owner_shown_once_and_audited(baking, owner, share_maker):
    client = client_for(share_maker)

    body = make_links(client, baking, audience="public", expires="30")

    [token] = LINK.findall(body)
    share = selectors.share_get_by_token(token=token)
    assert (share.conversation_id, share.created_by_id, share.audience) == (
        baking.pk,
        owner.pk,
        "public",
    )
    assert share.expires_at is not None
    assert timedelta(days=29) < share.expires_at - timezone.now() <= timedelta(days=30)
    event = AuditEvent.objects.get(action=AuditEvent.Action.SHARE_CREATED)
    assert (event.actor, event.conversation_id, event.owner_id) == (
        share_maker,
        baking.pk,
        owner.pk,
    )
    assert str(share.pk) in event.reason
    assert token not in event.reason
    # Shown once: no later page carries it.
    assert token not in body_of(client, SHARES)
    assert token not in body_of(client, CONVERSATIONS)
    # The owner sees the link among theirs and may revoke it.
    owners_links = client_for(owner).get("/api/v1/shares/").json()["results"]
    assert [item["id"] for item in owners_links] == [str(share.pk)]


def test_without_the_transcript_permission_no_link_is_made(baking, owner):
    no_transcript = staff("maker", *MODERATOR_PERMISSIONS, "add_share", "view_share")
    no_add = staff("reader2", *MODERATOR_PERMISSIONS, "view_transcript", "view_share")

    for user in (no_transcript, no_add):
        body = make_links(client_for(user), baking)
        assert not LINK.search(body)
    assert not Share.objects.exists()
    assert not AuditEvent.objects.filter(action=AuditEvent.Action.SHARE_CREATED).exists()


def test_too_many_conversations_at_once_make_no_link(owner, share_maker, settings):
    from conversations.admin import shares as share_admin

    conversations = [
        services.conversation_create(owner=owner, title=f"c{i}")
        for i in range(share_admin.SHARE_LINKS_AT_ONCE + 1)
    ]

    body = make_links(client_for(share_maker), *conversations)

    assert "Select at most" in body
    assert not Share.objects.exists()


def test_revoking_is_audited_once_per_link_closed(baking, owner, share_keeper):
    first, token = shared(baking)
    closed_before, _ = shared(baking, revoked_at=timezone.now() - timedelta(days=1))
    data = {
        "action": "revoke_shares",
        "_selected_action": [str(first.pk), str(closed_before.pk)],
        "index": "0",
    }

    response = client_for(share_keeper).post(SHARES, data, follow=True)

    assert "Revoked 1 share link" in response.content.decode()
    with pytest.raises(Share.DoesNotExist):
        selectors.share_get_by_token(token=token)
    [event] = AuditEvent.objects.filter(action=AuditEvent.Action.SHARE_REVOKED)
    assert (event.actor, event.conversation_id, event.owner_id) == (
        share_keeper,
        baking.pk,
        owner.pk,
    )
    assert str(first.pk) in event.reason
    # The earlier revocation keeps its time.
    kept = Share.objects.get(pk=closed_before.pk).revoked_at
    assert kept is not None
    assert kept < timezone.now() - timedelta(hours=1)


def test_staff_who_may_only_view_shares_cannot_revoke(baking, share_viewer):
    share, token = shared(baking)
    data = {"action": "revoke_shares", "_selected_action": [str(share.pk)], "index": "0"}

    client_for(share_viewer).post(SHARES, data)

    assert selectors.share_get_by_token(token=token) == share
    assert not AuditEvent.objects.filter(action=AuditEvent.Action.SHARE_REVOKED).exists()


def test_the_owner_revoking_through_the_api_is_no_staff_action(baking, owner, as_user):
    share, _ = shared(baking)

    response = as_user(owner).delete(f"/api/v1/shares/{share.pk}/")

    assert response.status_code in (200, 204)
    assert Share.objects.get(pk=share.pk).revoked_at is not None
    assert not AuditEvent.objects.filter(action=AuditEvent.Action.SHARE_REVOKED).exists()


def test_the_detail_page_shows_the_pin_tags_and_folder_to_whom_it_may(
    baking, owner, moderator, reader
):
    folder = folder_ensure(owner=owner, name="Secret folder")
    ConversationTag.objects.bulk_create(
        ConversationTag(conversation=baking, tag=tag)
        for tag in tags_ensure(owner=owner, names=["a", "b", "c"])
    )
    Conversation.objects.filter(pk=baking.pk).update(folder=folder, pinned=True)
    url = reverse("admin:conversations_conversation_change", args=[baking.pk])

    for user, sees_folder in ((moderator, False), (reader, True)):
        body = body_of(client_for(user), url)
        assert ("Secret folder" in body) is sees_folder
        assert re.search(
            r"field-tag_count.*?<label>Tags:</label>\s*<div class=\"readonly\">3<", body, re.S
        )
        assert re.search(r"field-pinned.*?icon-yes", body, re.S)


def test_a_conversation_at_its_link_limit_gets_none_and_the_page_says_why(
    baking, share_maker, settings
):
    settings.PARLEY_MAX_SHARES_PER_CONVERSATION = 1
    shared(baking)

    body = make_links(client_for(share_maker), baking)

    assert "no link made" in body
    assert not LINK.search(body)
    assert Share.objects.count() == 1
    assert not AuditEvent.objects.filter(action=AuditEvent.Action.SHARE_CREATED).exists()


def test_the_form_asks_for_audience_and_expiry_first(baking, share_maker):
    data = {"action": "create_share_link", "_selected_action": [str(baking.pk)], "index": "0"}

    body = client_for(share_maker).post(CONVERSATIONS, data).content.decode()

    assert "Each gets a read-only link" in body
    assert 'name="audience"' in body
    assert 'name="expires"' in body
    assert not Share.objects.exists()


def test_the_list_costs_the_same_queries_for_many_links_as_for_few(baking, owner, share_viewer):
    client = client_for(share_viewer)

    def queries() -> int:
        with CaptureQueriesContext(connection) as captured:
            body_of(client, SHARES)
        return len(captured)

    shared(baking)
    few = queries()
    for index in range(10):
        conversation = services.conversation_create(owner=owner, title=f"c{index}")
        shared(conversation, revoked_at=timezone.now() if index % 2 else None)

    assert queries() == few
