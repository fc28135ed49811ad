"""Folders, tags and pins over the API: `folders/`, `tags/`, a conversation's PATCH and
payload, the list's filters and pinned-first pages, `tag:` in queries, another user's
folders and tags out of reach, and the list's query count flat in its page size."""

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from conversations import services
from conversations.models import Conversation
from conversations.selectors.cursors import cursor_encode
from tests.support.api import error_of

pytestmark = pytest.mark.django_db

C = "/api/v1/conversations/"


def _ids(response) -> list[str]:
    assert response.status_code == 200, response.content[:300]
    return [item["id"] for item in response.json()["results"]]


def _made(owner, title: str, *, minutes_ago: int, **organised) -> Conversation:
    conversation = services.conversation_create(owner=owner, title=title)
    Conversation.objects.filter(pk=conversation.pk).update(
        last_activity_at=timezone.now() - timedelta(minutes=minutes_ago)
    )
    if organised:
        services.conversation_organise(conversation=conversation, **organised)
    conversation.refresh_from_db()
    return conversation


def test_folders_are_created_listed_moved_renamed_and_deleted(api, owner):
    created = [api.post("/api/v1/folders/", {"name": n}, format="json") for n in "ABC"]
    assert [r.status_code for r in created] == [201, 201, 201]
    a, b, c = (r.json() for r in created)
    assert (a["name"], a["position"], a["conversation_count"]) == ("A", 0, 0)
    assert set(a) == {"id", "name", "position", "conversation_count", "created_at"}

    moved = api.patch(f"/api/v1/folders/{c['id']}/", {"position": 0}, format="json")
    assert moved.status_code == 200
    assert moved.json()["position"] == 0
    renamed = api.patch(f"/api/v1/folders/{a['id']}/", {"name": "Alpha"}, format="json")
    assert renamed.json()["name"] == "Alpha"
    listed = api.get("/api/v1/folders/").json()
    assert [(f["name"], f["position"]) for f in listed["results"]] == [
        ("C", 0),
        ("Alpha", 1),
        ("B", 2),
    ]
    assert listed["next"] is None

    conversation = _made(owner, "Filed", minutes_ago=1)
    filed = api.patch(f"{C}{conversation.pk}/", {"folder_id": b["id"]}, format="json")
    assert filed.json()["folder_id"] == b["id"]
    counts = {
        f["name"]: f["conversation_count"] for f in api.get("/api/v1/folders/").json()["results"]
    }
    assert counts == {"C": 0, "Alpha": 0, "B": 1}

    assert api.delete(f"/api/v1/folders/{b['id']}/").status_code == 204
    assert api.get(f"{C}{conversation.pk}/").json()["folder_id"] is None
    assert [f["position"] for f in api.get("/api/v1/folders/").json()["results"]] == [0, 1]
    assert api.delete(f"/api/v1/folders/{b['id']}/").status_code == 404


def test_a_taken_folder_name_and_bad_bodies_are_400s(api):
    assert api.post("/api/v1/folders/", {"name": "Work"}, format="json").status_code == 201
    taken = api.post("/api/v1/folders/", {"name": "work"}, format="json")
    assert taken.status_code == 400
    assert error_of(taken)["details"]["problems"][0]["path"] == "$.name"
    for body in (
        {},
        {"name": 5},
        {"name": " "},
        {"name": "x", "position": -1},
        {"name": "x", "y": 1},
    ):
        assert api.post("/api/v1/folders/", body, format="json").status_code == 400, body
    assert len(api.get("/api/v1/folders/").json()["results"]) == 1


def test_patch_organises_a_conversation_and_its_payload_says_so(api, owner):
    folder = services.folder_create(owner=owner, name="Work")
    conversation = _made(owner, "Plan", minutes_ago=1)
    answer = api.patch(
        f"{C}{conversation.pk}/",
        {"pinned": True, "folder_id": str(folder.pk), "tags": ["b", " A ", "a", "C"]},
        format="json",
    )
    assert answer.status_code == 200
    body = answer.json()
    assert (body["pinned"], body["folder_id"], body["tags"]) == (
        True,
        str(folder.pk),
        ["A", "b", "C"],
    )
    assert api.get(f"{C}{conversation.pk}/").json()["tags"] == ["A", "b", "C"]

    # The whole list replaces; null takes it out of its folder.
    body = api.patch(
        f"{C}{conversation.pk}/", {"tags": ["b"], "folder_id": None}, format="json"
    ).json()
    assert (body["tags"], body["folder_id"]) == (["b"], None)
    created = api.post(C, {"title": "New"}, format="json").json()
    assert (created["pinned"], created["folder_id"], created["tags"]) == (False, None, [])


@pytest.mark.parametrize(
    "body",
    [
        {"title": "Changed", "tags": "work"},
        {"title": "Changed", "tags": [3]},
        {"title": "Changed", "tags": ["x" * 65]},
        {"title": "Changed", "tags": [f"t{n}" for n in range(21)]},
        {"title": "Changed", "pinned": "yes"},
        {"title": "Changed", "folder_id": 5},
        {"title": "Changed", "folder_id": "not-an-id"},
    ],
)
def test_a_bad_organising_field_is_a_400_and_changes_nothing(api, owner, body):
    conversation = _made(owner, "Plan", minutes_ago=1, tags=["kept"])
    answer = api.patch(f"{C}{conversation.pk}/", body, format="json")
    assert answer.status_code == 400
    after = api.get(f"{C}{conversation.pk}/").json()
    assert (after["title"], after["tags"], after["pinned"]) == ("Plan", ["kept"], False)


def test_another_users_or_an_unknown_folder_is_a_404_in_a_patch_and_a_filter(
    api, owner, outsider, outsider_api
):
    theirs = services.folder_create(owner=outsider, name="Theirs")
    conversation = _made(owner, "Plan", minutes_ago=1)
    for folder_id in (str(theirs.pk), "0b7f3c1e-5d2a-4e8b-9c6f-1a2b3c4d5e6f"):
        answer = api.patch(
            f"{C}{conversation.pk}/", {"title": "No", "folder_id": folder_id}, format="json"
        )
        assert answer.status_code == 404
        assert error_of(answer)["code"] == "not_found"
        assert api.get(f"{C}?folder={folder_id}").status_code == 404
    assert api.get(f"{C}{conversation.pk}/").json()["title"] == "Plan"
    # And the owner of that folder may file nothing of someone else's in it.
    moved = outsider_api.patch(
        f"{C}{conversation.pk}/", {"folder_id": str(theirs.pk)}, format="json"
    )
    assert moved.status_code == 404


def test_another_user_gets_404_on_a_folder_and_never_sees_folders_or_tags(api, owner, outsider_api):
    folder = services.folder_create(owner=owner, name="Secret folder")
    _made(owner, "Plan", minutes_ago=1, tags=["secret-tag"], folder_id=folder.pk)
    url = f"/api/v1/folders/{folder.pk}/"
    assert outsider_api.patch(url, {"name": "Mine"}, format="json").status_code == 404
    assert outsider_api.delete(url).status_code == 404
    assert outsider_api.get("/api/v1/folders/").json()["results"] == []
    assert outsider_api.get("/api/v1/tags/").json()["results"] == []
    assert outsider_api.get(f"{C}?tag=secret-tag").json()["results"] == []
    assert api.get("/api/v1/folders/").json()["results"][0]["name"] == "Secret folder"


def test_tags_lists_those_in_use_by_name_with_counts(api, owner):
    _made(owner, "one", minutes_ago=1, tags=["beta", "Alpha"])
    _made(owner, "two", minutes_ago=2, tags=["alpha"])
    archived = _made(owner, "old", minutes_ago=3, tags=["gamma", "beta"])
    services.conversation_update(conversation=archived, archived=True)
    dropped = _made(owner, "three", minutes_ago=4, tags=["delta"])
    services.conversation_organise(conversation=dropped, tags=[])
    assert api.get("/api/v1/tags/").json() == {
        "results": [
            {"name": "Alpha", "count": 2},
            {"name": "beta", "count": 2},
            {"name": "gamma", "count": 1},
        ],
        "next": None,
    }


def test_the_list_filters_by_tag_folder_and_pin(api, owner):
    work = services.folder_create(owner=owner, name="Work")
    a = _made(owner, "a", minutes_ago=1, tags=["Travel"])
    b = _made(owner, "b", minutes_ago=2, tags=["travel", "family"], folder_id=work.pk)
    c = _made(owner, "c", minutes_ago=3, pinned=True, folder_id=work.pk)
    assert _ids(api.get(f"{C}?tag=TRAVEL")) == [str(a.pk), str(b.pk)]
    assert _ids(api.get(f"{C}?tag=travel&tag=family")) == [str(b.pk)]
    assert _ids(api.get(f"{C}?tag=nowhere")) == []
    assert _ids(api.get(f"{C}?folder={work.pk}")) == [str(c.pk), str(b.pk)]
    assert _ids(api.get(f"{C}?pinned=true")) == [str(c.pk)]
    assert _ids(api.get(f"{C}?pinned=false")) == [str(a.pk), str(b.pk)]
    assert api.get(f"{C}?pinned=maybe").status_code == 400


def test_tag_terms_in_q_restrict_the_list_and_the_search(api, owner):
    a = _made(owner, "Lisbon trip", minutes_ago=1, tags=["two words"])
    b = _made(owner, "Lisbon notes", minutes_ago=2, tags=["misc"])
    for conversation in (a, b):
        services.messages_append(
            conversation=conversation,
            messages=[services.NewMessage(role="user", content="Pastel de nata in Lisbon")],
        )
    assert _ids(api.get(C, {"q": 'lisbon tag:"Two Words"'})) == [str(a.pk)]
    assert _ids(api.get(C, {"q": "tag:misc"})) == [str(b.pk)]
    assert _ids(api.get(C, {"q": "tag:misc tag:other"})) == []

    hits = api.get("/api/v1/search/", {"q": 'nata tag:"two words"'}).json()["results"]
    assert {hit["conversation_id"] for hit in hits} == {str(a.pk)}
    assert len(api.get("/api/v1/search/", {"q": "nata"}).json()["results"]) == 2
    only_tags = api.get("/api/v1/search/", {"q": "tag:misc"})
    assert only_tags.status_code == 400
    assert error_of(only_tags)["details"]["problems"][0]["path"] == "$.query.q"


def test_pinned_come_first_and_pages_cross_the_boundary_without_gaps(api, owner):
    made = [_made(owner, f"c{n}", minutes_ago=n) for n in range(7)]
    pinned = [made[5], made[2], made[6]]
    for conversation in pinned:
        services.conversation_organise(conversation=conversation, pinned=True)
    expected = [str(c.pk) for c in sorted(pinned, key=lambda c: c.last_activity_at, reverse=True)]
    expected += [str(c.pk) for c in made if c not in pinned]

    seen, url = [], f"{C}?limit=2"
    while url:
        page = api.get(url).json()
        seen += [item["id"] for item in page["results"]]
        url = page["next"]
    assert seen == expected


def test_a_cursor_made_before_pins_goes_on_among_the_unpinned(api, owner):
    made = [_made(owner, f"c{n}", minutes_ago=n) for n in range(3)]
    old = cursor_encode([made[0].last_activity_at.isoformat(), str(made[0].pk)])
    assert _ids(api.get(C, {"cursor": old})) == [str(made[1].pk), str(made[2].pk)]
    for bad in ("bm9wZQ", cursor_encode(["yes", made[0].last_activity_at.isoformat(), "x"])):
        answer = api.get(C, {"cursor": bad})
        assert answer.status_code == 400
        assert error_of(answer)["details"]["problems"][0]["path"] == "$.cursor"


def _list_queries(api, count: int) -> int:
    with CaptureQueriesContext(connection) as captured:
        assert len(_ids(api.get(f"{C}?limit=200"))) == count
    return len(captured.captured_queries)


def test_the_lists_queries_do_not_grow_with_its_conversations_and_tags(api, owner):
    folder = services.folder_create(owner=owner, name="Work")
    for n in range(5):
        _made(owner, f"c{n}", minutes_ago=n, tags=[f"t{n}", "shared"], folder_id=folder.pk)
    few = _list_queries(api, 5)
    for n in range(5, 50):
        _made(owner, f"c{n}", minutes_ago=n, tags=[f"t{n % 7}", "shared"], pinned=n % 3 == 0)
    assert _list_queries(api, 50) == few
