"""`POST /api/v1/conversations/import/` with a ChatGPT export: a report per conversation,
each stored on its own, and garbage refused by path without storing anything."""

import json
from typing import Any

import pytest
import yaml
from rest_framework.test import APIClient

from conversations.models import Conversation
from tests.support.api import error_of
from tests.support.chatgpt import (
    CYCLE,
    EDITED,
    LINEAR,
    MISSING_PARENT,
    fixture,
    fixture_bytes,
    leaves,
    stored_paths,
)

URL = "/api/v1/conversations/import/"


def post(client: APIClient, body: bytes, **headers: Any) -> Any:
    return client.post(URL, body, content_type="application/json", **headers)


def test_the_fixture_export_imports_with_a_report(api, owner):
    response = post(api, fixture_bytes())
    assert response.status_code == 201, response.content
    body = response.json()
    assert (body["imported"], body["failed"]) == (5, 2)
    results = body["results"]
    assert [r["index"] for r in results] == list(range(7))
    assert [r["status"] for r in results] == ["imported"] * 5 + ["failed"] * 2
    first = results[LINEAR]
    assert first["title"] == "Sourdough starter schedule"
    assert first["chatgpt_id"] == "6650a1c0-0000-8000-9000-00000000000a"
    assert first["error"] is None
    assert first["conversation"]["title"] == "Sourdough starter schedule"
    assert first["conversation"]["metadata"]["source"] == "chatgpt"
    assert first["conversation"]["message_count"] == 4
    edited = Conversation.objects.get(pk=results[EDITED]["conversation"]["id"])
    assert edited.owner == owner
    paths = stored_paths(edited)
    assert len(paths) == leaves(fixture()[EDITED]["mapping"])
    assert paths[edited.active_branch_id][-1].content.startswith("- Monsieur Moustache")


def test_a_broken_conversation_fails_alone_and_stores_nothing(api, owner):
    body = post(api, fixture_bytes()).json()
    for index, where in ((CYCLE, "cycle"), (MISSING_PARENT, "not in the mapping")):
        result = body["results"][index]
        assert result["conversation"] is None
        assert result["error"]["code"] == "invalid_import"
        problems = result["error"]["details"]["problems"]
        assert all(p["path"].startswith(f"$[{index}].mapping.") for p in problems)
        assert where in problems[0]["message"]
    titles = set(Conversation.objects.filter(owner=owner).values_list("title", flat=True))
    assert len(titles) == 5
    assert not titles & {"Broken: a cycle", "Broken: a missing parent"}


def test_another_user_cannot_see_the_imported_conversations(api, outsider, as_user):
    body = post(api, fixture_bytes()).json()
    stranger = as_user(outsider)
    for result in body["results"][:5]:
        conversation_id = result["conversation"]["id"]
        assert stranger.get(f"/api/v1/conversations/{conversation_id}/").status_code == 404
        messages = stranger.get(f"/api/v1/conversations/{conversation_id}/messages/")
        assert messages.status_code == 404
    assert stranger.get("/api/v1/conversations/").json()["results"] == []


def test_one_conversation_object_imports_too(api, owner):
    response = post(api, json.dumps(fixture()[LINEAR]).encode())
    assert response.status_code == 201, response.content
    assert response.json()["imported"] == 1


def test_an_export_where_nothing_imports_is_400_with_every_problem(api, owner):
    broken = json.dumps([fixture()[CYCLE], fixture()[MISSING_PARENT]]).encode()
    response = post(api, broken)
    assert response.status_code == 400
    error = error_of(response)
    assert error["code"] == "invalid_import"
    assert "None of the 2 conversation(s) could be imported" in error["message"]
    paths = [p["path"] for p in error["details"]["problems"]]
    assert paths[0].startswith("$[0].mapping.")
    assert paths[-1].startswith("$[1].mapping.")
    assert [r["status"] for r in error["details"]["results"]] == ["failed", "failed"]
    assert not Conversation.objects.filter(owner=owner).exists()


@pytest.mark.parametrize(
    ("body", "code", "path"),
    [
        (b'[{"title": "cut short",', "invalid_json", "$"),
        (b"[\xff\xfe]", "invalid_json", "$"),
        (b"[]", "invalid_import", None),
        (b"[1, null]", "invalid_import", "$[0]"),
        (b'{"mapping": "nodes"}', "invalid_import", "$.mapping"),
        (b'{"title": "x", "mapping": {"a": {"parent": "b"}}}', "invalid_import", "$.mapping.a"),
    ],
)
def test_malformed_exports_are_400_and_store_nothing(api, owner, body, code, path):
    response = post(api, body)
    assert response.status_code == 400
    error = error_of(response)
    assert error["code"] == code
    if path is not None:
        assert error["details"]["problems"][0]["path"].startswith(path)
    assert not Conversation.objects.filter(owner=owner).exists()


@pytest.mark.parametrize("body", [b'"just a string"', b"42", b'{"not": "an export"}'])
def test_garbage_that_is_not_an_export_gets_the_ordinary_import_errors(api, owner, body):
    response = post(api, body)
    assert response.status_code == 400
    assert error_of(response)["details"]["problems"]
    assert not Conversation.objects.filter(owner=owner).exists()


def test_an_export_over_the_size_limit_is_413(api, owner, settings):
    settings.PARLEY_IMPORT_MAX_BYTES = 1000
    response = post(api, fixture_bytes())
    assert response.status_code == 413
    assert error_of(response)["code"] == "request_too_large"
    assert not Conversation.objects.filter(owner=owner).exists()


def test_a_repeat_with_the_same_idempotency_key_imports_once(api, owner):
    first = post(api, fixture_bytes(), HTTP_IDEMPOTENCY_KEY="chatgpt-1")
    again = post(api, fixture_bytes(), HTTP_IDEMPOTENCY_KEY="chatgpt-1")
    assert first.status_code == again.status_code == 201
    assert again["Idempotent-Replayed"] == "true"
    assert again.json() == first.json()
    assert Conversation.objects.filter(owner=owner).count() == 5


def test_a_refused_export_frees_its_idempotency_key(api, owner):
    broken = json.dumps([fixture()[CYCLE]]).encode()
    assert post(api, broken, HTTP_IDEMPOTENCY_KEY="chatgpt-2").status_code == 400
    again = post(api, broken, HTTP_IDEMPOTENCY_KEY="chatgpt-2")
    assert again.status_code == 400
    assert "Idempotent-Replayed" not in again


def test_the_schema_documents_the_chatgpt_form_and_its_report():
    schema = yaml.safe_load(APIClient().get("/api/schema/").content)
    operation = schema["paths"]["/api/v1/conversations/import/"]["post"]
    assert "ChatGPT" in operation["description"]
    request = operation["requestBody"]["content"]["application/json"]["schema"]
    assert {option["type"] for option in request["oneOf"]} == {"object", "array"}
    created = operation["responses"]["201"]["content"]["application/json"]["schema"]
    options = schema["components"]["schemas"][created["$ref"].rsplit("/", 1)[-1]]["oneOf"]
    assert {o["$ref"].rsplit("/", 1)[-1] for o in options} == {
        "ConversationOut",
        "ChatGPTImportReportOut",
    }
    report = schema["components"]["schemas"]["ChatGPTImportReportOut"]
    assert set(report["required"]) == {"results", "imported", "failed"}
