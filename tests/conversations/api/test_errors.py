"""Every error is JSON in one shape, including 404, 405, 429 and 500."""

import json

import pytest

from conversations.errors import CONVERSATION_QUOTA_EXCEEDED, QuotaExceeded
from conversations.models import Conversation
from tests.support.api import error_of

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    ("path", "code"),
    [
        ("/api/v1/nothing-here/", "unknown_url"),
        ("/api/v1/conversations/not-a-uuid/", "not_found"),
        ("/api/v1/conversations/00000000-0000-0000-0000-000000000000/messages/", "not_found"),
        ("/api/v1/runs/00000000-0000-0000-0000-000000000000/", "not_found"),
        ("/api/elsewhere", "unknown_url"),
    ],
)
def test_unknown_paths_and_objects_are_json_404(api, path, code):
    response = api.get(path)
    assert response.status_code == 404
    assert response["Content-Type"] == "application/json"
    assert error_of(response)["code"] == code


def test_validation_errors_list_every_problem_with_its_path(api):
    response = api.post(
        "/api/v1/conversations/",
        {"title": ["not", "text"], "tools": "calculator", "metadata": []},
        format="json",
    )
    assert response.status_code == 400
    error = error_of(response)
    assert error["code"] == "invalid"
    paths = {p["path"] for p in error["details"]["problems"]}
    assert paths == {"$.title", "$.tools", "$.metadata"}


def test_malformed_json_is_invalid_json(api):
    response = api.post("/api/v1/conversations/", "{", content_type="application/json")
    assert response.status_code == 400
    assert error_of(response)["code"] == "invalid_json"


def test_a_form_body_is_415(api):
    response = api.post("/api/v1/conversations/", {"title": "x"}, format="multipart")
    assert response.status_code == 415
    assert error_of(response)["code"] == "unsupported_media_type"


def test_throttled_requests_get_429_with_retry_after(api, settings):
    from django.core.cache import cache

    cache.clear()
    settings.PARLEY_API_THROTTLE_RATE = "2/minute"
    assert api.get("/api/v1/tools/").status_code == 200
    assert api.get("/api/v1/tools/").status_code == 200
    response = api.get("/api/v1/tools/")
    assert response.status_code == 429
    assert error_of(response)["code"] == "throttled"
    assert int(response["Retry-After"]) > 0
    cache.clear()


def test_model_work_has_its_own_tighter_budget(api, owner, settings):
    from django.core.cache import cache

    cache.clear()
    settings.PARLEY_API_MODEL_THROTTLE_RATE = "1/minute"
    body = {"messages": [{"role": "user", "content": "hi"}]}
    settings.PARLEY_DEMO_TOKENS_PER_SECOND = 0
    assert api.post("/api/v1/stateless/chat/", body, format="json").status_code == 200
    assert api.post("/api/v1/stateless/chat/", body, format="json").status_code == 429
    # Reading is not model work.
    assert api.get("/api/v1/conversations/").status_code == 200
    cache.clear()


def test_a_reached_quota_is_429_with_its_code(api, monkeypatch):
    from conversations.api.views import conversations as views

    def refuse(**kwargs):
        raise QuotaExceeded(CONVERSATION_QUOTA_EXCEEDED, "You have reached 100 conversations.")

    monkeypatch.setattr(views.services, "conversation_create", refuse)
    response = api.post("/api/v1/conversations/", {"title": "x"}, format="json")
    assert response.status_code == 429
    assert error_of(response) == {
        "code": "conversation_quota_exceeded",
        "message": "You have reached 100 conversations.",
    }
    assert not Conversation.objects.exists()


def test_a_bug_is_a_json_500_not_an_html_page(api, monkeypatch):
    from conversations.api.views import tools

    def broken():
        raise RuntimeError("boom")

    monkeypatch.setattr(tools, "tool_catalog", broken)
    got = api.get("/api/v1/tools/")
    assert got.status_code == 500
    assert error_of(got) == {"code": "server_error", "message": "Internal server error."}


def test_the_500_handler_answers_json_for_api_paths(rf):
    from conversations.api.errors import server_error

    response = server_error(rf.get("/api/v1/tools/"))
    assert response.status_code == 500
    assert json.loads(response.content)["error"]["code"] == "server_error"
    assert b"<html" in server_error(rf.get("/admin/")).content.lower()
