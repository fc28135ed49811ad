"""Conversations over the API: create/read/update/delete, pages, limits, query counts."""

from datetime import timedelta

import pytest
from django.utils import timezone

from conversations import engine, services
from conversations.models import Conversation, Message
from tests.support.api import error_of

pytestmark = pytest.mark.django_db


def test_create_read_update_archive_and_delete(api, owner):
    created = api.post(
        "/api/v1/conversations/",
        {"title": "Trip", "system_prompt": "Be brief.", "tools": ["calculator"]},
        format="json",
    )
    assert created.status_code == 201
    conversation_id = created.json()["id"]
    assert created.json()["tools"] == ["calculator"]

    detail = api.get(f"/api/v1/conversations/{conversation_id}/").json()
    assert detail["system_prompt"] == "Be brief."
    assert detail["active_run"] is None

    changed = api.patch(
        f"/api/v1/conversations/{conversation_id}/",
        {"title": "Trip to Rome", "archived": True, "metadata": {"team": "sales"}},
        format="json",
    ).json()
    assert (changed["title"], changed["archived"], changed["metadata"]) == (
        "Trip to Rome",
        True,
        {"team": "sales"},
    )
    listed = api.get("/api/v1/conversations/").json()["results"]
    assert conversation_id not in [c["id"] for c in listed]
    archived = api.get("/api/v1/conversations/?archived=true").json()["results"]
    assert [c["id"] for c in archived] == [conversation_id]

    assert api.delete(f"/api/v1/conversations/{conversation_id}/").status_code == 204
    assert not Conversation.objects.filter(pk=conversation_id).exists()
    assert api.get(f"/api/v1/conversations/{conversation_id}/").status_code == 404


def test_title_search(api, owner):
    services.conversation_create(owner=owner, title="Budget review")
    services.conversation_create(owner=owner, title="Holiday")
    found = api.get("/api/v1/conversations/?q=BUDGET").json()["results"]
    assert [c["title"] for c in found] == ["Budget review"]


def test_conversation_pages_follow_newest_activity_without_gaps(api, owner):
    base = timezone.now()
    ids = []
    for i in range(7):
        conversation = services.conversation_create(owner=owner, title=f"c{i}")
        Conversation.objects.filter(pk=conversation.pk).update(
            last_activity_at=base - timedelta(minutes=i)
        )
        ids.append(str(conversation.pk))
    seen = []
    url = "/api/v1/conversations/?limit=3"
    while url:
        page = api.get(url).json()
        seen += [c["id"] for c in page["results"]]
        url = page["next"]
    assert seen == ids


def test_message_pages_are_stable_while_messages_are_added(api, conversation):
    services.messages_append(
        conversation=conversation,
        messages=[services.NewMessage(role="user", content=f"m{i}") for i in range(5)],
    )
    first = api.get(f"/api/v1/conversations/{conversation.pk}/messages/?limit=2").json()
    assert [m["seq"] for m in first["results"]] == [1, 2]
    # A new message arrives between two page reads: the next page neither repeats nor skips.
    services.message_append(conversation=conversation, message=services.NewMessage(role="user"))
    second = api.get(first["next"]).json()
    assert [m["seq"] for m in second["results"]] == [3, 4]
    rest = api.get(f"/api/v1/conversations/{conversation.pk}/messages/?after=4").json()
    assert [m["seq"] for m in rest["results"]] == [5, 6]
    assert rest["next"] is None


@pytest.mark.parametrize(
    "query", ["limit=0", "limit=abc", "after=-1", "after=x", "cursor=nonsense"]
)
def test_bad_page_parameters_are_a_clear_400(api, conversation, query):
    path = "messages/" if "after" in query or "limit" in query else ""
    url = f"/api/v1/conversations/{conversation.pk}/{path}?{query}"
    if "cursor" in query:
        url = f"/api/v1/conversations/?{query}"
    response = api.get(url)
    assert response.status_code == 400
    assert error_of(response)["code"] == "invalid"


def test_limit_is_capped_at_200(api, conversation):
    services.messages_append(
        conversation=conversation,
        messages=[services.NewMessage(role="user", content="x") for _ in range(205)],
    )
    page = api.get(f"/api/v1/conversations/{conversation.pk}/messages/?limit=1000").json()
    assert len(page["results"]) == 200
    assert "after=200" in page["next"]


def test_listing_50_conversations_takes_a_fixed_number_of_queries(
    api, owner, django_assert_max_num_queries
):
    for i in range(50):
        services.conversation_create(owner=owner, title=f"c{i}")
    # Session and user lookups, then one query for the page, whatever its size.
    with django_assert_max_num_queries(4):
        page = api.get("/api/v1/conversations/?limit=50").json()
    assert len(page["results"]) == 50


def test_a_page_of_200_messages_takes_a_fixed_number_of_queries(
    api, conversation, django_assert_max_num_queries
):
    services.messages_append(
        conversation=conversation,
        messages=[services.NewMessage(role="user", content=f"m{i}") for i in range(250)],
    )
    with django_assert_max_num_queries(5):
        page = api.get(f"/api/v1/conversations/{conversation.pk}/messages/?limit=200").json()
    assert len(page["results"]) == 200


def test_metadata_limits_refuse_and_store_nothing(api, owner):
    too_many = {f"k{i}": "v" for i in range(17)}
    long_key = {"k" * 65: "v"}
    long_value = {"k": "v" * 513}
    for metadata in (too_many, long_key, long_value):
        response = api.post("/api/v1/conversations/", {"metadata": metadata}, format="json")
        assert response.status_code == 400, metadata
        problems = error_of(response)["details"]["problems"]
        assert problems[0]["path"].startswith("$.metadata")
    assert not Conversation.objects.filter(owner=owner).exists()


def test_a_message_over_the_size_limit_is_refused_and_nothing_stored(api, conversation, settings):
    settings.PARLEY_MAX_MESSAGE_CHARS = 10
    response = api.post(
        f"/api/v1/conversations/{conversation.pk}/messages/",
        {"content": "x" * 11},
        format="json",
    )
    assert response.status_code == 400
    assert error_of(response)["details"]["problems"][0]["path"] == "$.content"
    assert not Message.objects.filter(conversation=conversation).exists()


def test_a_body_over_the_request_limit_is_413(api, conversation, settings):
    settings.PARLEY_API_MAX_BODY_BYTES = 100
    response = api.post(
        f"/api/v1/conversations/{conversation.pk}/events/", {"content": "x" * 200}, format="json"
    )
    assert response.status_code == 413
    assert error_of(response)["code"] == "request_too_large"
    assert not Message.objects.exists()


def test_a_second_message_while_a_run_is_active_is_409(api, conversation):
    engine.run_start(conversation=conversation, content="first")
    response = api.post(
        f"/api/v1/conversations/{conversation.pk}/messages/", {"content": "second"}, format="json"
    )
    assert response.status_code == 409
    assert error_of(response)["code"] == "run_active"
    assert Message.objects.filter(conversation=conversation).count() == 1


def test_context_events_and_draft_edits_are_stored_in_order(api, conversation):
    url = f"/api/v1/conversations/{conversation.pk}"
    event = api.post(f"{url}/events/", {"content": "User is in Rome."}, format="json").json()
    assert (event["role"], event["kind"], event["seq"]) == ("system", "event", 1)
    assert api.put(f"{url}/draft/", {"draft": "Dear Bob"}, format="json").json() == {
        "draft": "Dear Bob",
        "draft_edited": True,
        "changed": True,
    }
    same = api.put(f"{url}/draft/", {"draft": "Dear Bob"}, format="json").json()
    assert same["changed"] is False


def test_fork_refuses_a_point_outside_the_conversation(api, conversation):
    services.message_append(
        conversation=conversation, message=services.NewMessage(role="user", content="hi")
    )
    response = api.post(f"/api/v1/conversations/{conversation.pk}/fork/", {"at_seq": 5})
    assert response.status_code == 400
    assert error_of(response)["details"]["problems"][0]["path"] == "$.at_seq"
    fork = api.post(
        f"/api/v1/conversations/{conversation.pk}/fork/", {"at_seq": 1}, format="json"
    ).json()
    assert (fork["forked_from"], fork["message_count"]) == (str(conversation.pk), 1)


@pytest.mark.parametrize(
    ("format", "content_type", "needle"),
    [
        ("json", "application/json", b'"format": "parley.conversation"'),
        ("markdown", "text/markdown; charset=utf-8", b"# Cats"),
        ("jsonl", "application/jsonl", b'{"messages": [{"role": "user"'),
    ],
)
def test_export_streams_each_format(api, conversation, format, content_type, needle):
    services.message_append(
        conversation=conversation, message=services.NewMessage(role="user", content="meow")
    )
    response = api.get(f"/api/v1/conversations/{conversation.pk}/export/?format={format}")
    assert response.status_code == 200
    assert response.streaming
    assert response["Content-Type"] == content_type
    assert "attachment" in response["Content-Disposition"]
    assert needle in b"".join(response.streaming_content)


def test_an_unknown_export_format_is_400(api, conversation):
    response = api.get(f"/api/v1/conversations/{conversation.pk}/export/?format=pdf")
    assert response.status_code == 400


def test_import_round_trips_and_a_bad_document_stores_nothing(api, owner, conversation):
    services.message_append(
        conversation=conversation, message=services.NewMessage(role="user", content="meow")
    )
    document = b"".join(
        api.get(f"/api/v1/conversations/{conversation.pk}/export/").streaming_content
    )
    imported = api.post("/api/v1/conversations/import/", document, content_type="application/json")
    assert imported.status_code == 201
    assert imported.json()["message_count"] == 1

    broken = document.replace(b'"role": "user"', b'"role": "robot"')
    before = Conversation.objects.count()
    response = api.post("/api/v1/conversations/import/", broken, content_type="application/json")
    assert response.status_code == 400
    assert error_of(response)["details"]["problems"][0]["path"] == "$.messages[0].role"
    assert Conversation.objects.count() == before


def test_a_fine_tuning_line_imports_over_the_api(api, owner):
    line = (
        b'{"messages": [{"role": "system", "content": "Be kind."}, '
        b'{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}]}\n'
    )
    for content_type in ("application/json", "application/jsonl"):
        response = api.post("/api/v1/conversations/import/", line, content_type=content_type)
        assert response.status_code == 201, response.content
        body = response.json()
        assert (body["title"], body["system_prompt"], body["message_count"]) == (
            "Hi",
            "Be kind.",
            2,
        )
        assert Conversation.objects.get(pk=body["id"]).owner == owner


def test_an_import_over_the_size_limit_is_413(api, settings):
    settings.PARLEY_IMPORT_MAX_BYTES = 50
    response = api.post(
        "/api/v1/conversations/import/", b"{" + b" " * 100 + b"}", content_type="application/json"
    )
    assert response.status_code == 413


def test_message_pages_have_the_same_shape_as_every_other_message_payload(api, conversation):
    from conversations.serializers import message_payload

    stored = services.message_append(
        conversation=conversation,
        message=services.NewMessage(
            role="assistant",
            content="Let me check.",
            tool_calls=[{"id": "call_1", "name": "calculator", "arguments": '{"x": 1}'}],
            usage={"total_tokens": 3},
            provider_payload={"finish_reason": "tool_calls"},
        ),
    )
    page = api.get(f"/api/v1/conversations/{conversation.pk}/messages/").json()
    assert page["results"] == [message_payload(stored)]
