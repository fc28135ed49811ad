"""The shared links page `/shares/`: the signed-in user's links of every conversation with
their state, nobody else's; and the theme switch every page offers."""

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from accounts.models import User
from conversations import services
from conversations.models import Conversation, Share

pytestmark = pytest.mark.django_db


@pytest.fixture
def alice(owner: User) -> Client:
    client = Client()
    client.force_login(owner)
    return client


def shared(conversation: Conversation, **options: object) -> Share:
    share, _ = services.share_create(
        conversation=conversation,
        user=conversation.owner,
        **options,  # type: ignore[arg-type]
    )
    return share


def test_the_page_needs_a_login(client: Client):
    response = client.get("/shares/")

    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/")


def test_the_owner_sees_each_link_with_its_conversation_and_state(alice: Client, owner):
    cats = services.conversation_create(owner=owner, title="Cats")
    dogs = services.conversation_create(owner=owner, title="Dogs")
    active = shared(cats, audience="signed_in")
    revoked = shared(dogs)
    services.share_revoke(share=revoked)
    expiring = shared(dogs, expires_at=timezone.now() + timedelta(days=1))
    Share.objects.filter(pk=expiring.pk).update(
        expires_at=timezone.now() - timedelta(minutes=1), view_count=7
    )

    page = alice.get("/shares/").content.decode()

    assert f'href="/chat/{cats.pk}/">Cats</a>' in page
    assert f'href="/chat/{dogs.pk}/">Dogs</a>' in page
    assert "Signed-in users" in page
    assert "Anyone with the link" in page
    assert "<td>7</td>" in page
    statuses = [
        page.split(f'data-share-id="{share.pk}"')[1].split('class="share-status">')[1]
        for share in (active, revoked, expiring)
    ]
    assert [status.split("<")[0].split(" ")[0] for status in statuses] == [
        "active",
        "revoked",
        "expired",
    ]
    # Revoking is offered for the links still open to revoke.
    assert page.count("data-revoke-share=") == 2
    assert "/s/" not in page  # the addresses themselves are never kept


def test_another_user_sees_none_of_the_owners_links(alice: Client, owner, outsider):
    shared(services.conversation_create(owner=owner, title="Alice's secret plans"))
    mallory = Client()
    mallory.force_login(outsider)

    page = mallory.get("/shares/").content.decode()

    assert "Alice's secret plans" not in page
    assert "data-share-id" not in page
    assert "No shared links yet." in page


def test_the_account_navigation_links_to_the_page(alice: Client):
    assert 'href="/shares/"' in alice.get("/accounts/api-keys/").content.decode()
    assert 'href="/shares/"' in alice.get("/chat/").content.decode()


@pytest.mark.parametrize("path", ["/accounts/login/", "/s/no-such-link/", "/no-such-page/"])
def test_every_page_offers_the_theme_switch_and_sets_the_theme_before_painting(
    client: Client, path: str
):
    page = client.get(path).content.decode()

    assert "data-theme-switch" in page
    head = page.split("</head>")[0]
    # A classic script before the style sheet: the theme is on <html> for the first paint.
    assert head.index('<script src="/static/web/theme.js"></script>') < head.index("app.css")


@pytest.mark.parametrize("path", ["/chat/", "/shares/", "/accounts/api-keys/"])
def test_the_signed_in_pages_offer_the_theme_switch(alice: Client, path: str):
    assert "data-theme-switch" in alice.get(path).content.decode()
