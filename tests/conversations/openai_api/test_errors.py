"""Every error of /openai/v1/ in OpenAI's shape, parsed by the SDK into its exception
classes; another user's ids are 404 everywhere."""

from collections.abc import Callable
from functools import partial

import openai
import pytest

from conversations.models import Conversation, Message
from tests.support.openai_api import body_of

pytestmark = pytest.mark.django_db

ERROR_FIELDS = {"message", "type", "param", "code"}


def error_of(response) -> dict:
    body = response.json()
    assert set(body) == {"error"}, body
    assert set(body["error"]) == ERROR_FIELDS, body
    assert response.headers["content-type"] == "application/json"
    return body["error"]


def test_bad_requests_are_bad_request_errors_naming_the_parameter(client):
    conversation = client.conversations.create()
    cases = [
        (lambda: client.conversations.create(metadata="x"), "metadata", "invalid_type"),
        (
            lambda: client.conversations.create(metadata={"k": "v" * 513}),
            "metadata.k",
            "invalid_value",
        ),
        (
            lambda: client.conversations.create(metadata={str(n): "v" for n in range(17)}),
            "metadata",
            "invalid_value",
        ),
        (
            lambda: client.conversations.create(items=[{"role": "user", "content": "x"}] * 21),
            "items",
            "array_above_max_length",
        ),
        (
            lambda: client.conversations.create(extra_body={"title": "x"}),
            "title",
            "unknown_parameter",
        ),
        (
            lambda: client.conversations.items.create(conversation.id, items=[]),
            "items",
            "empty_array",
        ),
        (
            lambda: client.conversations.items.create(
                conversation.id, items=[{"role": "robot", "content": "x"}]
            ),
            "items[0].role",
            "invalid_value",
        ),
        (
            lambda: client.conversations.items.create(
                conversation.id, items=[{"role": "user", "content": 5}]
            ),
            "items[0].content",
            "invalid_type",
        ),
        (
            lambda: client.conversations.items.create(
                conversation.id, items=[{"role": "user", "content": " "}]
            ),
            "items[0].content",
            "invalid_value",
        ),
        (
            lambda: client.conversations.items.create(
                conversation.id, items=[{"type": "function_call", "call_id": "c", "name": "f"}]
            ),
            "items[0].arguments",
            "missing_required_parameter",
        ),
        (
            lambda: client.conversations.items.create(
                conversation.id, items=[{"type": "web_search_call", "id": "w"}]
            ),
            "items[0].type",
            "invalid_value",
        ),
        (
            lambda: client.conversations.items.create(
                conversation.id,
                items=[{"role": "user", "content": "x", "colour": "red"}],
            ),
            "items[0].colour",
            "unknown_parameter",
        ),
        (
            lambda: client.conversations.items.list(conversation.id, limit=101),
            "limit",
            "invalid_value",
        ),
        (
            lambda: client.conversations.items.list(conversation.id, order="sideways"),
            "order",
            "invalid_value",
        ),
        (
            lambda: client.conversations.items.list(conversation.id, after="msg_nope"),
            "after",
            "invalid_value",
        ),
    ]
    for call, param, code in cases:
        with pytest.raises(openai.BadRequestError) as caught:
            call()
        error = body_of(caught.value)
        assert (error["param"], error["code"], error["type"]) == (
            param,
            code,
            "invalid_request_error",
        ), error
        assert error["message"]
    assert not Message.objects.exists()


def test_authentication_errors(sdk, owner, wsgi_app):
    import httpx2 as httpx

    for key in ("not-a-parley-key", "pk_00000000_" + "x" * 43):
        bad = openai.OpenAI(
            base_url="http://testserver/openai/v1",
            api_key=key,
            http_client=httpx.Client(transport=wsgi_app),
            max_retries=0,
        )
        with pytest.raises(openai.AuthenticationError) as caught:
            bad.conversations.create()
        assert body_of(caught.value)["code"] == "invalid_api_key"
        assert caught.value.response.headers["www-authenticate"] == "Bearer"
    anonymous = httpx.Client(transport=wsgi_app).get("http://testserver/openai/v1/models")
    assert anonymous.status_code == 401
    assert error_of(anonymous)["code"] == "missing_api_key"


def test_throttled_requests_are_rate_limit_errors(client, settings):
    settings.PARLEY_API_THROTTLE_RATE = "2/minute"
    client.models.list()
    client.models.list()
    with pytest.raises(openai.RateLimitError) as caught:
        client.models.list()
    assert body_of(caught.value)["code"] == "rate_limit_exceeded"
    assert int(caught.value.response.headers["retry-after"]) > 0


def test_quotas_are_rate_limit_errors_not_worth_retrying(client, settings, owner):
    settings.PARLEY_MAX_MESSAGES_PER_DAY = 2
    with pytest.raises(openai.RateLimitError) as caught:
        client.conversations.create(items=[{"role": "user", "content": str(n)} for n in range(3)])
    assert body_of(caught.value)["code"] == "message_quota_exceeded"
    assert body_of(caught.value)["type"] == "insufficient_quota"
    assert caught.value.response.headers["x-should-retry"] == "false"
    assert not Conversation.objects.filter(owner=owner).exists()
    settings.PARLEY_MAX_CONVERSATIONS_PER_USER = 1
    client.conversations.create()
    with pytest.raises(openai.RateLimitError) as caught:
        client.conversations.create()
    assert body_of(caught.value)["code"] == "conversation_quota_exceeded"


def test_another_users_ids_are_not_found_on_every_endpoint(sdk, owner, outsider):
    mine = sdk(owner)
    theirs = sdk(outsider)
    conversation = mine.conversations.create(
        items=[
            {"role": "user", "content": "secret"},
            {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c", "output": "done"},
        ]
    )
    items = list(mine.conversations.items.list(conversation.id))
    attempts: list[Callable[[], object]] = [
        partial(theirs.conversations.retrieve, conversation.id),
        partial(theirs.conversations.update, conversation.id, metadata={"a": "b"}),
        partial(theirs.conversations.delete, conversation.id),
        partial(theirs.conversations.items.list, conversation.id),
        partial(
            theirs.conversations.items.create,
            conversation.id,
            items=[{"role": "user", "content": "x"}],
        ),
    ]
    # My items, in my conversation and in theirs: never found.
    own = theirs.conversations.create()
    for item in items:
        for where in (conversation.id, own.id):
            attempts += [
                partial(theirs.conversations.items.retrieve, item.id, conversation_id=where),
                partial(theirs.conversations.items.delete, item.id, conversation_id=where),
            ]
    for attempt in attempts:
        with pytest.raises(openai.NotFoundError) as caught:
            attempt()
        assert body_of(caught.value)["type"] == "invalid_request_error"
    with pytest.raises(openai.BadRequestError):
        theirs.conversations.items.list(own.id, after=items[0].id)
    assert mine.conversations.retrieve(conversation.id).metadata == {}
    assert len(list(mine.conversations.items.list(conversation.id))) == 3


def test_the_raw_error_shape_and_headers(raw, settings):
    settings.PARLEY_API_MAX_BODY_BYTES = 1000
    conversation = raw.post("/conversations", json={}).json()["id"]
    unknown = raw.get("/nothing/here")
    assert unknown.status_code == 404
    assert error_of(unknown)["code"] == "unknown_url"
    assert raw.post("/conversations/x/items/y/z").status_code == 404
    wrong_method = raw.put(f"/conversations/{conversation}", json={})
    assert wrong_method.status_code == 405
    assert error_of(wrong_method)["code"] == "method_not_allowed"
    assert "POST" in wrong_method.headers["allow"]
    malformed = raw.post(
        "/conversations", content=b'{"metadata": ', headers={"content-type": "application/json"}
    )
    assert malformed.status_code == 400
    assert error_of(malformed)["code"] == "invalid_json"
    # JSON whatever the content type says, as OpenAI reads bodies.
    as_text = raw.post("/conversations", content=b'{"metadata": {"a": "b"}}')
    assert as_text.json()["metadata"] == {"a": "b"}
    not_an_object = raw.post("/conversations", json=[1])
    assert (not_an_object.status_code, error_of(not_an_object)["code"]) == (400, "invalid_type")
    deep = raw.post("/conversations", content=b"[" * 200 + b"]" * 200)
    assert (deep.status_code, error_of(deep)["code"]) == (400, "invalid_json")
    oversize = raw.post("/conversations", json={"metadata": {"k": "v" * 2000}})
    assert (oversize.status_code, error_of(oversize)["code"]) == (413, "request_too_large")
    missing = raw.get(f"/conversations/conv_{'0' * 32}")
    assert (missing.status_code, error_of(missing)["code"]) == (404, "not_found")
    html_asked = raw.get("/models", headers={"accept": "text/html"})
    assert html_asked.status_code == 200
    assert html_asked.json()["object"] == "list"
    unauthenticated = raw.get("/models", headers={"authorization": ""})
    assert unauthenticated.status_code == 401
    assert error_of(unauthenticated)["type"] == "invalid_request_error"
    assert unauthenticated.headers["www-authenticate"] == "Bearer"
    nul = raw.get(f"/conversations/{conversation}/items", params={"after": "a\x00"})
    assert (nul.status_code, error_of(nul)["param"]) == (400, "after")
    assert "x-request-id" in unknown.headers


def test_a_bug_is_a_server_error_in_the_same_shape(client, raw, monkeypatch):
    from conversations.openai_api.views import models

    def broken() -> list[dict[str, str]]:
        raise RuntimeError("a bug")

    monkeypatch.setattr(models, "model_objects", broken)
    with pytest.raises(openai.InternalServerError) as caught:
        client.models.list()
    assert body_of(caught.value)["type"] == "server_error"
    assert "a bug" not in caught.value.message
    answer = raw.get("/models")
    assert answer.status_code == 500
    assert error_of(answer)["type"] == "server_error"
