"""Hostile bodies on every endpoint that takes one: deep nesting, numbers no column holds,
text no database stores, wrong types, unknown fields. Each is a 400 naming the problem,
nothing is stored, and the owner's pages keep working."""

import json
from typing import Any

import pytest

from accounts.models import ApiKey
from conversations import services
from conversations.models import Conversation, Message
from tests.support.api import error_of

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("redis_url")]


def deep(levels: int) -> str:
    return "[" * levels + "]" * levels


# Raw bodies (text) spliced into a valid request at the place of a value.
HOSTILE_VALUES = {
    "deep-array": deep(50_000),
    "deep-object": '{"a":' * 20_000 + "1" + "}" * 20_000,
    "moderately-deep": deep(200),
    "nan": "NaN",
    "infinity": "-Infinity",
    "overflowing-float": "1e400",
    "huge-integer": "1" + "0" * 30,
    "lone-surrogate": '"x\\ud800y"',
    "nul": '"x\\u0000y"',
    "surrogate-key": '{"\\udfff": "v"}',
    "nul-key": '{"a\\u0000": "v"}',
}


@pytest.fixture
def conversation(owner) -> Conversation:
    conversation = services.conversation_create(owner=owner, title="Mine")
    services.user_message_append(conversation=conversation, content="hello")
    return conversation


def endpoints(conversation: Conversation) -> list[tuple[str, str, str]]:
    """(method, path, body template with {} where the hostile value goes)."""
    base = f"/api/v1/conversations/{conversation.pk}"
    return [
        ("post", "/api/v1/conversations/", '{"title": "t", "metadata": {"k": {}}}'),
        ("post", "/api/v1/conversations/", '{"title": {}}'),
        ("patch", f"{base}/", '{"metadata": {"k": {}}}'),
        ("patch", f"{base}/", '{"title": {}}'),
        ("post", f"{base}/messages/", '{"content": {}}'),
        ("post", f"{base}/events/", '{"content": {}}'),
        ("put", f"{base}/draft/", '{"draft": {}}'),
        ("post", f"{base}/fork/", '{"at_seq": {}}'),
        ("post", "/api/v1/chat/", '{"message": {}}'),
        ("post", "/api/v1/stateless/chat/", '{"messages": [{"role": "user", "content": {}}]}'),
        ("post", "/api/v1/api-keys/", '{"name": {}}'),
    ]


def counts() -> tuple[int, int, int]:
    return Conversation.objects.count(), Message.objects.count(), ApiKey.objects.count()


@pytest.mark.parametrize("kind", HOSTILE_VALUES)
def test_every_body_refuses_hostile_json_and_stores_nothing(api, conversation, kind):
    before = counts()
    draft = Conversation.objects.get(pk=conversation.pk).draft
    for method, path, template in endpoints(conversation):
        body = template.replace("{}", HOSTILE_VALUES[kind], 1)
        response = getattr(api, method)(path, body, content_type="application/json")
        assert response.status_code == 400, (method, path, response.content[:200])
        error = error_of(response)
        assert error["code"] in ("invalid_json", "invalid"), (method, path, error)
    assert counts() == before
    assert Conversation.objects.get(pk=conversation.pk).draft == draft
    # The owner's pages keep answering.
    assert api.get("/api/v1/conversations/").status_code == 200
    assert api.get(f"/api/v1/conversations/{conversation.pk}/").status_code == 200
    assert api.get(f"/api/v1/conversations/{conversation.pk}/export/").status_code == 200


def test_the_refusal_names_where_the_problem_is(api):
    body = '{"title": "t", "metadata": {"team": "a\\ud800"}}'
    response = api.post("/api/v1/conversations/", body, content_type="application/json")
    error = error_of(response)
    assert error["code"] == "invalid_json"
    assert error["details"]["problems"] == [
        {
            "path": "$.metadata.team",
            "message": "contains an unpaired surrogate, which is not valid text",
        }
    ]


def test_an_import_refuses_deep_nesting_and_unstorable_text_by_path(api, owner):
    document: dict[str, Any] = {"format": "parley.conversation", "version": 1}
    deep_import = json.dumps(document)[:-1] + ', "conversation": ' + deep(100_000) + "}"
    response = api.post(
        "/api/v1/conversations/import/", deep_import, content_type="application/json"
    )
    assert response.status_code == 400
    assert "deeper than" in json.dumps(error_of(response))
    surrogate = '{"format": "parley.conversation", "version": 1, "x": "\\udfff"}'
    response = api.post("/api/v1/conversations/import/", surrogate, content_type="application/json")
    assert response.status_code == 400
    assert error_of(response)["details"]["problems"][0]["path"] == "$.x"
    surrogate_key = '{"format": "parley.conversation", "\\udfff": 1}'
    response = api.post(
        "/api/v1/conversations/import/", surrogate_key, content_type="application/json"
    )
    assert error_of(response)["details"]["problems"][0]["path"] == "$.\\udfff"
    assert not Conversation.objects.filter(owner=owner).exists()


@pytest.mark.parametrize(
    "cursor",
    [
        "W1tbW1tbW1tbW1tbW1tbW1tbW1tbW1tbW1tbW1tbW1tbW1tbW1tbW1tbW1tbW1tbW1tbW1tbW1tbW1tb",
        "WyIyMDI0LTAxLTAxVDAwOjAwOjAwKzAwOjAwIiwgIlx1ZDgwMCJd",  # ["...", "\ud800"]
        "TmFO",  # NaN
        "!!!",
    ],
)
def test_a_hostile_cursor_is_a_400(api, cursor):
    response = api.get("/api/v1/conversations/", {"cursor": cursor})
    assert response.status_code == 400
    assert error_of(response)["details"]["problems"][0]["path"] == "$.cursor"


def test_a_3000_deep_cursor_is_a_400(api):
    import base64

    cursor = base64.urlsafe_b64encode(deep(3000).encode()).decode()
    response = api.get("/api/v1/conversations/", {"cursor": cursor})
    assert response.status_code == 400


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/api/v1/conversations/", {"title": 123}, "title"),
        ("/api/v1/conversations/", {"title": None}, "title"),
        ("/api/v1/conversations/", {"tools": "calculator"}, "tools"),
        ("/api/v1/conversations/", {"tools": [1]}, "tools"),
        ("/api/v1/conversations/", {"metadata": {"k": 1}}, "metadata"),
        ("/api/v1/conversations/", {"system_prompt": ["x"]}, "system_prompt"),
        ("/api/v1/chat/", {"message": "hi", "conversation_id": 5}, "conversation_id"),
        ("/api/v1/chat/", {"message": True}, "message"),
        ("/api/v1/api-keys/", {"name": 7}, "name"),
        ("/api/v1/stateless/chat/", {"messages": [{"role": 1, "content": "x"}]}, "messages"),
    ],
)
def test_wrong_json_types_are_refused_not_coerced(api, path, body, field):
    before = counts()
    response = api.post(path, body, format="json")
    assert response.status_code == 400, response.content
    paths = [p["path"] for p in error_of(response)["details"]["problems"]]
    assert any(p.startswith(f"$.{field}") for p in paths), paths
    assert counts() == before


@pytest.mark.parametrize(
    ("method", "suffix", "body", "field"),
    [
        ("patch", "/", {"archived": "yes"}, "archived"),
        ("patch", "/", {"archived": 1}, "archived"),
        ("patch", "/", {"title": 123}, "title"),
        ("post", "/fork/", {"at_seq": "1"}, "at_seq"),
        ("post", "/fork/", {"at_seq": 1.0}, "at_seq"),
        ("post", "/fork/", {"at_seq": True}, "at_seq"),
        ("put", "/draft/", {"draft": 5}, "draft"),
        ("post", "/messages/", {"content": ["hi"]}, "content"),
    ],
)
def test_wrong_types_on_a_conversation_are_refused(api, conversation, method, suffix, body, field):
    url = f"/api/v1/conversations/{conversation.pk}{suffix}"
    response = getattr(api, method)(url, body, format="json")
    assert response.status_code == 400, response.content
    assert error_of(response)["details"]["problems"][0]["path"] == f"$.{field}"
    conversation.refresh_from_db()
    assert conversation.archived_at is None
    assert conversation.title == "Mine"


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("post", "/api/v1/conversations/", {"title": "t", "colour": "red"}),
        ("patch", "{conversation}/", {"titel": "typo"}),
        ("post", "{conversation}/messages/", {"content": "hi", "priority": 1}),
        ("post", "{conversation}/events/", {"content": "hi", "role": "system"}),
        ("put", "{conversation}/draft/", {"draft": "d", "edited": True}),
        ("post", "{conversation}/fork/", {"at_seq": 1, "title": "x"}),
        ("post", "/api/v1/chat/", {"message": "hi", "stream": True}),
        (
            "post",
            "/api/v1/stateless/chat/",
            {"messages": [{"role": "user", "content": "x", "name": "n"}]},
        ),
        ("post", "/api/v1/api-keys/", {"name": "ci", "expires_at": "2030-01-01"}),
    ],
)
def test_unknown_fields_are_an_error_naming_them(api, conversation, method, path, body):
    before = counts()
    url = path.replace("{conversation}", f"/api/v1/conversations/{conversation.pk}")
    response = getattr(api, method)(url, body, format="json")
    assert response.status_code == 400, response.content
    problems = error_of(response)["details"]["problems"]
    assert all("not a field" in p["message"] for p in problems), problems
    assert counts() == before


def test_query_parameters_with_nul_are_refused(api):
    for path in ("/api/v1/conversations/", "/api/v1/search/"):
        response = api.get(path, {"q": "a\x00b"})
        assert response.status_code == 400
    assert api.get("/api/v1/conversations/", {"archived": "yes"}).status_code == 400
