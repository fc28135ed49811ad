"""Text that cannot be stored, wherever it would come from, and the values around it:
rows written before text was checked still render, query parameters and cursors are
parsed strictly, and every door that stores text (services included) refuses it."""

import base64
import json
from typing import Any

import pytest
from django.db.models import JSONField
from django.test import Client
from django.urls import reverse

from accounts import services as account_services
from accounts.models import ApiKey, User
from conversations import engine, services
from conversations.errors import ValidationFailed
from conversations.models import Conversation, Message, Run
from conversations.services.messages import NewMessage, message_append
from tests.support.api import error_of

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("redis_url")]

MARK = "LEGACY"


def _unstorable(raw: Any) -> Any:
    if not isinstance(raw, str):
        return raw
    # The escapes SQLite keeps inside a JSON column: a lone surrogate, a NUL.
    return raw.replace(f'"{MARK}":', '"k\\udfff":').replace(f'"{MARK}"', '"x\\ud800y\\u0000"')


@pytest.fixture
def legacy_rows(monkeypatch) -> None:
    """JSON columns read back as a row written before text was checked would be (SQLite
    keeps a lone surrogate inside JSON): every MARK becomes unstorable text."""
    original = JSONField.from_db_value

    def from_db_value(self: JSONField, value: Any, expression: Any, connection: Any) -> Any:
        return original(self, _unstorable(value), expression, connection)

    monkeypatch.setattr(JSONField, "from_db_value", from_db_value)


def test_stored_unstorable_text_never_breaks_the_owners_pages(api, owner, legacy_rows):
    conversation = services.conversation_create(owner=owner, title="Old", metadata={MARK: MARK})
    message_append(
        conversation=conversation,
        message=NewMessage(
            role=Message.Role.ASSISTANT,
            content="see the call",
            tool_calls=[{"id": MARK, "name": MARK, "arguments": "{}"}],
            usage={"prompt_tokens": 1},
            provider_payload={"finish_reason": MARK},
        ),
    )
    base = f"/api/v1/conversations/{conversation.pk}"

    for url in ("/api/v1/conversations/", f"{base}/", f"{base}/messages/"):
        response = api.get(url)
        assert response.status_code == 200, url
        assert "\ufffd" in response.content.decode("utf-8")
    detail = api.get(f"{base}/").json()
    assert detail["metadata"] == {"k\ufffd": "x\ufffdy\ufffd"}
    for format in ("json", "markdown", "jsonl"):
        response = api.get(f"{base}/export/", {"format": format})
        assert response.status_code == 200
        text = b"".join(response.streaming_content).decode("utf-8")
        assert "\ufffd" in text
        assert "\\u0000" not in text
        assert "\x00" not in text
    # The repaired export imports back.
    document = b"".join(api.get(f"{base}/export/").streaming_content)
    imported = api.post("/api/v1/conversations/import/", document, content_type="application/json")
    assert imported.status_code == 201, imported.content


def test_another_user_still_cannot_see_it(as_user, owner, outsider, legacy_rows):
    conversation = services.conversation_create(owner=owner, metadata={MARK: MARK})
    other = as_user(outsider)
    for suffix in ("/", "/messages/", "/export/"):
        response = other.get(f"/api/v1/conversations/{conversation.pk}{suffix}")
        assert response.status_code == 404
    assert other.get("/api/v1/conversations/").json()["results"] == []


# --- services refuse what the API refuses ----------------------------------------------


@pytest.mark.parametrize("client_id", ["a\ud800", "a\x00b"])
def test_run_start_refuses_an_unstorable_client_id(conversation, client_id):
    with pytest.raises(ValidationFailed) as caught:
        engine.run_start(conversation=conversation, content="hi", client_id=client_id)
    assert caught.value.problems[0].path == "$.client_id"
    assert not Message.objects.exists()
    assert not Run.objects.exists()


@pytest.mark.parametrize("name", ["key \ud800", "key \x00"])
def test_api_key_names_that_cannot_be_stored_are_refused(owner, name):
    with pytest.raises(ValueError, match="API key name"):
        account_services.api_key_create(owner=owner, name=name)
    assert not ApiKey.objects.exists()


# --- query parameters and cursors -------------------------------------------------------


@pytest.mark.parametrize(
    "query",
    [
        {"after": "1_0"},
        {"after": "\u0661"},  # an Arabic-Indic digit one
        {"after": " 1"},
        {"after": "99999999999999999999"},
        {"limit": "1e3"},
        {"limit": "0x10"},
        {"limit": "-1"},
    ],
)
def test_integer_query_parameters_want_plain_digits(api, conversation, query):
    response = api.get(f"/api/v1/conversations/{conversation.pk}/messages/", query)
    assert response.status_code == 400, response.content
    error = error_of(response)
    assert error["code"] == "invalid"
    assert error["details"]["problems"][0]["path"] == f"$.query.{next(iter(query))}"


def test_query_parameters_on_another_users_conversation_are_404(as_user, outsider, conversation):
    other = as_user(outsider)
    for query in ({"after": "1"}, {"after": "1_0"}):
        url = f"/api/v1/conversations/{conversation.pk}/messages/"
        assert other.get(url, query).status_code == 404


@pytest.mark.parametrize("value", ["yes", "1", "", "none"])
def test_archived_takes_only_its_documented_values(api, value):
    response = api.get("/api/v1/conversations/", {"archived": value})
    assert response.status_code == 400
    assert error_of(response)["details"]["problems"][0]["path"] == "$.query.archived"


@pytest.mark.parametrize("value", ["JSON", "csv", ""])
def test_export_format_takes_only_its_documented_values(
    api, as_user, outsider, conversation, value
):
    url = f"/api/v1/conversations/{conversation.pk}/export/"
    response = api.get(url, {"format": value})
    assert response.status_code == 400
    assert error_of(response)["details"]["problems"][0]["path"] == "$.query.format"
    assert as_user(outsider).get(url, {"format": value}).status_code == 404


def test_a_nul_anywhere_in_the_query_names_the_parameter(api):
    response = api.get("/api/v1/search/", {"q": "ok", "q2": "a\x00"})
    assert response.status_code == 400
    assert error_of(response)["details"]["problems"][0]["path"] == "$.query.q2"


def _cursor(value: Any) -> str:
    return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")


@pytest.mark.parametrize(
    "cursor",
    [
        _cursor(["2024-01-01T00:00:00+00:00", 5]),
        _cursor(["2024-01-01T00:00:00+00:00", None]),
        _cursor(["2024-01-01T00:00:00+00:00", ["x"]]),
        _cursor(["0001-01-01T00:00:00+01:00", "6f1c1c5e-0c39-4a53-9d0b-1f6a1b2c3d4e"]),
        _cursor(["9999-12-31T23:59:59-23:59", "0d4e2a7b-5f61-4c8e-8a3d-7b9c0e1f2a3b"]),
        _cursor({"a": 1, "b": 2}),
        _cursor(["2024-01-01T00:00:00+00:00", "a2b3c4d5-e6f7-4a8b-9c0d-e1f2a3b4c5d6", 3]),
        base64.urlsafe_b64encode(b'["2024-01-01T00:00:00+00:00", "\\u0000"]').decode(),
    ],
)
def test_a_forged_cursor_is_a_400_not_a_500(api, cursor):
    response = api.get("/api/v1/conversations/", {"cursor": cursor})
    assert response.status_code == 400, response.content
    assert error_of(response)["details"]["problems"][0]["path"] == "$.cursor"


# --- a request that takes no fields -------------------------------------------------------


def test_cancel_refuses_fields_it_does_not_take(api, as_user, conversation, outsider):
    _, run = engine.run_start(conversation=conversation, content="hi")
    url = f"/api/v1/runs/{run.pk}/cancel/"

    # Another user learns nothing from the body: the run is not theirs.
    assert as_user(outsider).post(url, {"force": True}, format="json").status_code == 404
    response = api.post(url, {"force": True}, format="json")
    assert response.status_code == 400
    problems = error_of(response)["details"]["problems"]
    assert [p["path"] for p in problems] == ["$.force"]
    assert "takes no fields" in problems[0]["message"]
    run.refresh_from_db()
    assert run.status == Run.Status.QUEUED
    assert api.post(url, format="json").status_code == 200
    run.refresh_from_db()
    assert run.status == Run.Status.CANCELLED


# --- import: JSON no body may carry is `invalid_json`, by path ----------------------------


@pytest.mark.parametrize(
    ("splice", "path"),
    [
        ('"usage": 1e400', "$"),
        ('"usage": {"prompt_tokens": NaN}', "$"),
        ('"usage": {"prompt_tokens": -Infinity}', "$"),
        ('"usage": {"prompt_tokens": 99999999999999999999999}', "$"),
        ('"usage": ' + "[" * 100_000 + "]" * 100_000, "$"),
        (
            '"provider_payload": ' + '{"a":' * 70 + "1" + "}" * 70,
            "$.messages[0].provider_payload.a",
        ),
        ('"usage": null, "content": "a\\ud800"', "$.messages[0].content"),
        ('"provider_payload": {"k\\u0000": 1}', "$.messages[0].provider_payload"),
    ],
)
def test_an_import_with_json_no_body_may_carry_is_invalid_json(api, owner, splice, path):
    source = services.conversation_create(owner=owner, title="Source")
    services.user_message_append(conversation=source, content="hello")
    document = b"".join(
        api.get(f"/api/v1/conversations/{source.pk}/export/").streaming_content
    ).decode()
    # In place of the exported value (for content: after it, and JSON keeps the last).
    key = splice.split(":")[0]
    hostile = document.replace(f"{key}: null", splice, 1)
    assert hostile != document
    before = Conversation.objects.count()

    response = api.post("/api/v1/conversations/import/", hostile, content_type="application/json")

    assert response.status_code == 400
    error = error_of(response)
    assert error["code"] == "invalid_json"
    assert error["details"]["problems"][0]["path"].startswith(path)
    assert Conversation.objects.count() == before


def test_stored_unstorable_text_never_breaks_pages_or_the_other_doors(owner, legacy_rows):
    # Every other way to read the same rows: the chat page, the admin's pages and
    # transcript, and /openai/v1/.
    conversation = services.conversation_create(owner=owner, title="Old", metadata={MARK: MARK})
    message_append(
        conversation=conversation,
        message=NewMessage(
            role=Message.Role.ASSISTANT,
            content="see the call",
            tool_calls=[{"id": MARK, "name": MARK, "arguments": "{}"}],
            provider_payload={"finish_reason": MARK},
        ),
    )
    browser = Client()
    browser.force_login(owner)
    root = User.objects.create_superuser(username="root", password="pw", email="r@example.com")
    admin = Client()
    admin.force_login(root)
    _, secret = account_services.api_key_create(owner=owner, name="reader")
    program = Client(headers={"authorization": f"Bearer {secret}"})
    change = reverse("admin:conversations_conversation_change", args=[conversation.pk])
    transcript = reverse("admin:conversations_conversation_transcript", args=[conversation.pk])
    pages = [
        (browser, f"/chat/{conversation.pk}/"),
        (admin, change),
        (admin, transcript),
        (admin, reverse("admin:conversations_conversation_changelist")),
        (program, f"/openai/v1/conversations/{conversation.pk}"),
        (program, f"/openai/v1/conversations/{conversation.pk}/items"),
    ]
    for client, url in pages:
        response = client.get(url)
        assert response.status_code == 200, url
        body = response.content.decode("utf-8")
        assert "\x00" not in body, url
        assert "\\ud800" not in body, url
        assert "\\udfff" not in body, url
