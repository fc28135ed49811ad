"""One error vocabulary, rendered by each door in its own shape.

Every code of the vocabulary goes through the three renderings (REST, the OpenAI-compatible
API, the websocket), so a new code is covered as soon as it is declared; then the main
conditions are caused for real through each door: a run already active, an object that is
not the caller's, invalid input and a used-up quota.
"""

import json
from collections.abc import Callable
from typing import Any

import openai
import pytest
from asgiref.sync import sync_to_async
from django.db import connections
from rest_framework.test import APIClient

from accounts.models import User
from conversations import services
from conversations.api.errors import error_json
from conversations.api.errors import error_response as rest_response
from conversations.consumers.frames import error_frame
from conversations.errors import (
    AUTHENTICATION_FAILED,
    CONVERSATION_QUOTA_EXCEEDED,
    INVALID,
    INVALID_JSON,
    NOT_AUTHENTICATED,
    RUN_ACTIVE,
    SERVER_ERROR,
    STREAM_UNAVAILABLE,
    THROTTLED,
    VOCABULARY,
    ErrorCode,
    ParleyError,
    Problem,
    Throttled,
    ValidationFailed,
)
from conversations.models import Conversation, Message, Run
from conversations.openai_api.errors import OPENAI, SHOULD_RETRY
from conversations.openai_api.errors import error_response as openai_response
from tests.support.api import error_of as rest_error_of
from tests.support.openai_api import body_of
from tests.support.sockets import connect_as

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("fresh_throttles")]

OPENAI_FIELDS = {"message", "type", "param", "code"}
# The conditions OpenAI has its own code for: the one documented exception each.
OPENAI_ALIASES = {
    "invalid": "invalid_value",
    "not_authenticated": "missing_api_key",
    "authentication_failed": "invalid_api_key",
    "throttled": "rate_limit_exceeded",
    "run_active": "conversation_locked",
    "server_error": None,
}
# Retrying at once cannot succeed: the conversation's state or a quota must change first.
NOT_RETRIED = {
    "run_active",
    "no_active_run",
    "draft_edited_meanwhile",
    "events_expired",
    "idempotency_answer_not_kept",
    "conversation_quota_exceeded",
    "message_quota_exceeded",
    "file_in_use",
}


@pytest.fixture
def rest_as(request) -> Callable[[User], APIClient]:
    """A REST client logged in as a user (tests/api's)."""
    return request.getfixturevalue("as_user")


@pytest.fixture
def openai_as(request) -> Callable[[User], openai.OpenAI]:
    """The official SDK with a user's key, through WSGI (tests/openai_api's)."""
    return request.getfixturevalue("sdk")


@pytest.fixture
def rest(rest_as, owner) -> APIClient:
    return rest_as(owner)


@pytest.fixture
def sdk_client(openai_as, owner) -> openai.OpenAI:
    return openai_as(owner)


def an_error(entry: ErrorCode) -> ParleyError:
    return Throttled(7) if entry is THROTTLED else ParleyError(entry)


# --- every code through every door's rendering ---------------------------------------------


@pytest.mark.parametrize("entry", list(VOCABULARY.values()), ids=list(VOCABULARY))
def test_every_code_through_every_door(entry, rf):
    error = an_error(entry)
    assert error.message

    rest = rest_response(error)
    assert rest.status_code == entry.status
    assert rest.data["error"]["code"] == entry.code
    assert rest.data["error"]["message"] == error.message
    assert set(rest.data["error"]) <= {"code", "message", "details"}
    plain = error_json(error)  # what the Django views under /api/ answer: the same
    assert (plain.status_code, json.loads(plain.content)) == (rest.status_code, rest.data)

    request = rf.get("/openai/v1/somewhere")
    answer = openai_response(error, request)
    body = answer.data["error"]
    assert set(answer.data) == {"error"}
    assert set(body) == OPENAI_FIELDS
    assert body["code"] == OPENAI_ALIASES.get(entry.code, entry.code)
    assert body["message"]
    assert body["type"] in (
        "invalid_request_error",
        "requests",
        "insufficient_quota",
        "server_error",
    )
    # The caller's fault or the server's, alike on both HTTP doors (SDKs retry 5xx).
    assert answer.status_code // 100 == entry.status // 100
    assert (answer.get(SHOULD_RETRY) == "false") is (entry.code in NOT_RETRIED)

    for response in (rest, answer):
        if response.status_code == 401:
            assert response["WWW-Authenticate"] == "Bearer"
        if entry is THROTTLED:
            assert response["Retry-After"] == "7"

    assert error_frame(error) == {
        "type": "error",
        "code": entry.code,
        "message": error.message,
        **error.details,
    }


def test_the_openai_table_holds_every_code_and_nothing_else():
    assert set(OPENAI) == set(VOCABULARY.values())


def test_a_code_outside_the_vocabulary_cannot_be_raised():
    with pytest.raises(ValueError, match="not a code of the vocabulary"):
        ParleyError(ErrorCode("conflict", 409, "A conflict."))
    with pytest.raises(ValueError, match="not a refusal of the input"):
        ValidationFailed([Problem("$", "x")], RUN_ACTIVE)


@pytest.mark.parametrize("entry", [INVALID, INVALID_JSON], ids=["invalid", "invalid_json"])
def test_invalid_input_names_every_problem_on_every_door(entry, rf):
    problems = [Problem("$.metadata.k", "must be text"), Problem("$.title", "too long")]
    error = ValidationFailed(problems, entry)
    listed = [
        {"path": "$.metadata.k", "message": "must be text"},
        {"path": "$.title", "message": "too long"},
    ]

    rest = rest_response(error).data["error"]
    assert rest["details"] == {"problems": listed}
    assert rest["message"] == "Invalid request: $.metadata.k: must be text (and 1 more)."

    openai_body = openai_response(error, rf.get("/")).data["error"]
    assert openai_body["param"] == "metadata.k"  # OpenAI names the parameter, not a path
    assert "must be text" in openai_body["message"]

    assert error_frame(error)["problems"] == listed


def test_the_openai_door_words_authentication_its_own_way(rf):
    missing = openai_response(ParleyError(NOT_AUTHENTICATED), rf.get("/")).data["error"]
    assert "API key" in missing["message"]
    refused = ParleyError(AUTHENTICATION_FAILED, "Invalid or revoked API key.")
    body = openai_response(refused, rf.get("/")).data["error"]
    assert body["message"].startswith("Invalid or revoked API key.")
    server = openai_response(ParleyError(SERVER_ERROR), rf.get("/"))
    assert (server.status_code, server.data["error"]["type"]) == (500, "server_error")


def test_a_lost_stream_frame_says_where_to_resume():
    error = ParleyError(STREAM_UNAVAILABLE, details={"run_id": "r", "after": 4})
    frame = error_frame(error)
    assert (frame["code"], frame["run_id"], frame["after"]) == ("stream_unavailable", "r", 4)


# --- the main conditions, caused through each real door -------------------------------------


@pytest.fixture
def running(conversation) -> Run:
    return Run.objects.create(conversation=conversation, status=Run.Status.QUEUED)


def messages_url(conversation: Conversation) -> str:
    return f"/api/v1/conversations/{conversation.pk}/messages/"


def openai_id(conversation: Conversation) -> str:
    return f"conv_{conversation.pk.hex}"


@pytest.fixture
async def socket_db():
    """The consumer reaches the database from a helper thread: close that connection
    after the test, so the test database can be dropped."""
    yield
    await sync_to_async(connections.close_all)()


async def socket_error(user, conversation: Conversation, frame: dict[str, Any]) -> dict[str, Any]:
    """The error frame a frame gets; the socket stays open after it."""
    ws = await connect_as(user, conversation.pk)
    await ws.send_json_to(frame)
    while True:
        answer = await ws.receive_json_from(timeout=5)
        if answer["type"] == "error":
            break
    await ws.send_json_to({"type": "ping"})
    while (await ws.receive_json_from(timeout=5))["type"] != "pong":
        pass
    await ws.disconnect()
    return answer


def test_run_active_on_rest(rest, conversation, running):
    response = rest.post(messages_url(conversation), {"content": "second"}, format="json")
    assert response.status_code == 409
    assert rest_error_of(response) == {"code": "run_active", "message": RUN_ACTIVE.message}


def test_run_active_on_the_openai_door(sdk_client, conversation, running):
    for attempt in (
        lambda: sdk_client.responses.create(
            model="m", input="x", conversation=openai_id(conversation)
        ),
        lambda: sdk_client.conversations.items.create(
            openai_id(conversation), items=[{"role": "user", "content": "x"}]
        ),
    ):
        with pytest.raises(openai.BadRequestError) as caught:
            attempt()
        assert body_of(caught.value)["code"] == "conversation_locked"
        assert body_of(caught.value)["message"] == RUN_ACTIVE.message
        assert caught.value.response.headers[SHOULD_RETRY] == "false"
    assert not conversation.messages.exists()


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("redis_url", "socket_db")
async def test_run_active_on_the_websocket(conversation, owner):
    await sync_to_async(Run.objects.create)(conversation=conversation, status=Run.Status.QUEUED)
    frame = {"type": "message.create", "content": "second"}
    error = await socket_error(owner, conversation, frame)
    assert error == {"type": "error", "code": "run_active", "message": RUN_ACTIVE.message}


def test_another_users_conversation_is_not_found_on_rest(rest_as, conversation, outsider):
    response = rest_as(outsider).get(f"/api/v1/conversations/{conversation.pk}/")
    assert response.status_code == 404
    assert rest_error_of(response)["code"] == "not_found"


def test_another_users_conversation_is_not_found_on_the_openai_door(
    openai_as, conversation, outsider
):
    with pytest.raises(openai.NotFoundError) as caught:
        openai_as(outsider).conversations.retrieve(openai_id(conversation))
    assert body_of(caught.value)["code"] == "not_found"


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("redis_url", "socket_db")
async def test_another_users_run_is_not_found_on_the_websocket(conversation, owner, outsider):
    theirs = await sync_to_async(services.conversation_create)(owner=outsider)
    run = await sync_to_async(Run.objects.create)(conversation=theirs, status=Run.Status.QUEUED)
    error = await socket_error(owner, conversation, {"type": "subscribe", "run_id": str(run.pk)})
    assert (error["code"], error["message"]) == ("not_found", "No such run in this conversation.")


def test_invalid_input_on_rest(rest, conversation):
    response = rest.post(messages_url(conversation), {"content": "   "}, format="json")
    assert response.status_code == 400
    error = rest_error_of(response)
    assert error["code"] == "invalid"
    assert [p["path"] for p in error["details"]["problems"]] == ["$.content"]


def test_invalid_input_on_the_openai_door(sdk_client, conversation):
    with pytest.raises(openai.BadRequestError) as caught:
        sdk_client.conversations.items.create(
            openai_id(conversation), items=[{"role": "user", "content": "   "}]
        )
    error = body_of(caught.value)
    assert (error["code"], error["param"]) == ("invalid_value", "items[0].content")


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("redis_url", "socket_db")
async def test_invalid_input_on_the_websocket(conversation, owner):
    error = await socket_error(owner, conversation, {"type": "message.create", "content": "   "})
    assert error["code"] == "invalid"
    assert [p["path"] for p in error["problems"]] == ["$.content"]
    malformed = await socket_error(owner, conversation, {"type": "message.create", "content": 5})
    assert malformed["code"] == "invalid"  # a wrong type is invalid input, as on REST


@pytest.fixture
def quota_used(conversation, settings) -> Conversation:
    settings.PARLEY_MAX_MESSAGES_PER_DAY = 1
    services.user_message_append(conversation=conversation, content="one")
    return conversation


def test_a_quota_on_rest(rest, quota_used):
    response = rest.post(messages_url(quota_used), {"content": "two"}, format="json")
    assert response.status_code == 429
    error = rest_error_of(response)
    assert error["code"] == "message_quota_exceeded"
    assert "maximum of 1 messages" in error["message"]
    assert quota_used.messages.count() == 1


def test_a_quota_on_the_openai_door(sdk_client, quota_used):
    with pytest.raises(openai.RateLimitError) as caught:
        sdk_client.conversations.items.create(
            openai_id(quota_used), items=[{"role": "user", "content": "two"}]
        )
    error = body_of(caught.value)
    assert (error["code"], error["type"]) == ("message_quota_exceeded", "insufficient_quota")
    assert "maximum of 1 messages" in error["message"]
    assert caught.value.response.headers[SHOULD_RETRY] == "false"
    assert Message.objects.filter(conversation=quota_used).count() == 1


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("redis_url", "socket_db")
async def test_a_quota_on_the_websocket(conversation, owner, settings):
    settings.PARLEY_MAX_MESSAGES_PER_DAY = 1
    await sync_to_async(services.user_message_append)(conversation=conversation, content="one")
    error = await socket_error(owner, conversation, {"type": "message.create", "content": "two"})
    assert error["code"] == "message_quota_exceeded"
    assert "maximum of 1 messages" in error["message"]
    assert await sync_to_async(conversation.messages.count)() == 1


def test_the_conversation_quota_has_its_own_code_on_both_http_doors(
    rest, sdk_client, owner, settings
):
    settings.PARLEY_MAX_CONVERSATIONS_PER_USER = 1
    services.conversation_create(owner=owner)
    # The SDK first: Django's test client reconnects the signal that closes connections
    # after a request, which the SDK's in-process transport keeps off.
    with pytest.raises(openai.RateLimitError) as caught:
        sdk_client.conversations.create()
    assert body_of(caught.value)["code"] == CONVERSATION_QUOTA_EXCEEDED.code
    refused = rest.post("/api/v1/conversations/", {}, format="json")
    assert refused.status_code == 429
    assert rest_error_of(refused) == {
        "code": CONVERSATION_QUOTA_EXCEEDED.code,
        "message": body_of(caught.value)["message"],
    }
