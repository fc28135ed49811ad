"""GET search/: own messages only; full-text and ranked on PostgreSQL, a plain
case-insensitive match on SQLite."""

from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from conversations import services

pytestmark = pytest.mark.django_db

on_postgresql = pytest.mark.skipif(
    connection.vendor != "postgresql", reason="full-text search is PostgreSQL's"
)
on_sqlite = pytest.mark.skipif(connection.vendor != "sqlite", reason="the SQLite fallback")


def say(conversation, *texts):
    """Store `texts` in order, a second apart (so "newest" is well defined)."""
    start = timezone.now() - timedelta(hours=1)
    services.messages_append(
        conversation=conversation,
        messages=[
            services.NewMessage(role="user", content=text, created_at=start + timedelta(seconds=i))
            for i, text in enumerate(texts)
        ],
    )


def test_finds_own_messages_with_a_highlighted_snippet(api, owner, conversation):
    say(conversation, "We should visit the aquarium on Sunday.", "Nothing to see here.")
    results = api.get("/api/v1/search/?q=aquarium").json()["results"]
    assert len(results) == 1
    hit = results[0]
    assert hit["conversation_id"] == str(conversation.pk)
    assert hit["conversation_title"] == "Cats"
    assert hit["seq"] == 1
    assert "**aquarium**" in hit["snippet"]


def test_other_users_messages_are_never_found(api, outsider):
    theirs = services.conversation_create(owner=outsider, title="Theirs")
    say(theirs, "the aquarium is closed")
    assert api.get("/api/v1/search/?q=aquarium").json()["results"] == []


def test_an_empty_query_is_400(api):
    assert api.get("/api/v1/search/?q=%20").status_code == 400
    assert api.get("/api/v1/search/").status_code == 400


def test_limit_bounds_the_results(api, conversation):
    say(conversation, *[f"penguin number {i}" for i in range(30)])
    assert len(api.get("/api/v1/search/?q=penguin&limit=5").json()["results"]) == 5
    assert len(api.get("/api/v1/search/?q=penguin&limit=500").json()["results"]) == 30


@on_postgresql
def test_postgresql_matches_word_forms_and_ranks_the_best_first(api, conversation):
    say(
        conversation,
        "A cat sat on the mat.",
        "Cats, cats and more cats: the cat show had cats everywhere.",
        "The dog barked.",
    )
    results = api.get("/api/v1/search/?q=cats").json()["results"]
    assert [r["seq"] for r in results] == [2, 1]  # stemming finds "cat"; more matches rank higher
    assert results[0]["rank"] > results[1]["rank"] > 0
    phrase = api.get('/api/v1/search/?q="dog barked" -cat').json()["results"]
    assert [r["seq"] for r in phrase] == [3]


@on_postgresql
def test_postgresql_has_the_gin_index():
    with connection.cursor() as cursor:
        cursor.execute("SELECT indexdef FROM pg_indexes WHERE indexname = 'message_search_vector'")
        (definition,) = cursor.fetchone()
    assert "gin" in definition.lower()


@on_sqlite
def test_sqlite_matches_substrings_case_insensitively(api, conversation):
    say(conversation, "Bookkeeping is fun")
    results = api.get("/api/v1/search/?q=KEEP").json()["results"]
    assert [r["rank"] for r in results] == [None]
    assert "**keep**" in results[0]["snippet"]


@on_postgresql
def test_postgresql_ranks_only_the_newest_matches_of_a_common_word(api, conversation, settings):
    settings.PARLEY_SEARCH_CANDIDATES = 2
    say(conversation, "cats cats cats cats", "a cat", "one cat")
    results = api.get("/api/v1/search/?q=cat").json()["results"]
    # The oldest (and best) match is past the newest two, so it is not ranked at all.
    assert sorted(r["seq"] for r in results) == [2, 3]


@on_postgresql
def test_postgresql_finds_an_old_match_behind_many_newer_messages(api, conversation, settings):
    # The candidates are the newest matches, not the newest messages: a match older than
    # PARLEY_SEARCH_CANDIDATES other messages is still found.
    settings.PARLEY_SEARCH_CANDIDATES = 3
    say(conversation, "the giraffe was tall", *[f"nothing here {i}" for i in range(8)])
    results = api.get("/api/v1/search/?q=giraffe").json()["results"]
    assert [r["seq"] for r in results] == [1]
    assert "**giraffe**" in results[0]["snippet"]
