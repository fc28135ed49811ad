"""The conversation list's search: any part of a title (for readers of transcripts only)
or of an owner's username, an owner's email, or an id; on PostgreSQL the trigram indexes
answer it, so a search never reads every conversation."""

from typing import Any

import pytest
from django.contrib.messages import get_messages
from django.db import connection, transaction
from django.urls import reverse

from accounts.models import User
from conversations import services
from conversations.admin import conversations as conversation_admin
from conversations.models import Conversation
from tests.support.admin import client_for

pytestmark = pytest.mark.django_db

CHANGELIST = reverse("admin:conversations_conversation_changelist")


def listed(client, term: str) -> set[str]:
    response = client.get(CHANGELIST, {"q": term})
    assert response.status_code == 200
    return {str(c.pk) for c in response.context["cl"].result_list}


@pytest.fixture
def people(owner, outsider) -> dict[str, Conversation]:
    carol = User.objects.create_user(username="Carol.Lindqvist", email="Carol@Example.com")
    return {
        "alice": services.conversation_create(owner=owner, title="Quarterly Revenue draft"),
        "mallory": services.conversation_create(owner=outsider, title="Trip to Lisbon"),
        "carol": services.conversation_create(owner=carol, title="Notes"),
    }


def test_readers_find_any_part_of_a_title_in_any_case(reader, people):
    found = listed(client_for(reader), "rEVENUE dra")
    assert found == {str(people["alice"].pk)}


def test_titles_are_not_searched_for_those_who_may_not_read_them(moderator, people):
    assert listed(client_for(moderator), "revenue") == set()


def test_owners_are_found_by_part_of_their_username_or_their_whole_email(moderator, people):
    client = client_for(moderator)
    carol = str(people["carol"].pk)
    assert listed(client, "lindq") == {carol}
    assert listed(client, "carol@example.COM") == {carol}
    assert listed(client, "example.com") == set()  # emails only whole: not probed by parts
    assert listed(client, str(people["mallory"].pk)) == {str(people["mallory"].pk)}


def test_a_term_naming_too_many_owners_says_so(moderator, monkeypatch):
    monkeypatch.setattr(conversation_admin, "OWNER_MATCHES", 3)
    users = [User.objects.create_user(username=f"team-{i}") for i in range(5)]
    exact = User.objects.create_user(username="team")
    for user in [*users, exact]:
        services.conversation_create(owner=user)
    client = client_for(moderator)
    response = client.get(CHANGELIST, {"q": "team"})
    shown = {c.owner_id for c in response.context["cl"].result_list}
    assert len(shown) == 3
    assert exact.pk in shown  # the user named exactly is always among them
    notes = [str(m) for m in get_messages(response.wsgi_request)]
    assert any("More than 3 usernames contain this" in note for note in notes)
    assert listed(client, "team-4") == {
        str(c.pk) for c in Conversation.objects.filter(owner=users[4])
    }


# --- the plans (PostgreSQL) ------------------------------------------------------------


def _plan(queryset: Any) -> str:
    """EXPLAIN with sequential scans priced out: on a test-sized table a scan is cheaper
    than any index, so this asks which index, if any, can answer the query."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        return str(queryset.explain())


def test_every_lookup_of_the_search_is_an_index_read_on_postgresql(reader, people, rf):
    if connection.vendor != "postgresql":
        # The same lookups as a plain substring match (the tests above).
        assert Conversation.objects.filter(title__icontains="revenue").count() == 1
        return
    request = rf.get(CHANGELIST, {"q": "lindq"})
    request.user = reader
    model_admin = conversation_admin.ConversationAdmin(Conversation, conversation_admin.admin.site)
    found, _ = model_admin.search_results(request, Conversation.objects.all(), "lindq")
    # Titles and owners together: the title's trigram index and the owner index, OR-ed.
    plan = _plan(found.order_by().values("pk"))
    assert "conversation_title_trgm" in plan, plan
    assert "Seq Scan" not in plan, plan
    # The owners matched first: part of a username, a whole email (any case).
    for lookup, index in [
        ({"username__icontains": "lindq"}, "user_username_trgm"),
        ({"email__iexact": "carol@example.com"}, "user_email_trgm"),
    ]:
        plan = _plan(User.objects.filter(**lookup).values("pk"))
        assert index in plan, plan
