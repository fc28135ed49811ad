"""Every entry point of every door spends the same limits.

The entry points are read from the URL conf and the websocket's frame types, and whether
one makes the model work from its handler's `@model_work` declaration
(tests/support/entry_points.py). Each is exercised here: every one spends the user's
request budget and is refused once it is spent; each that makes the model work spends the
model budget and is refused, storing nothing, once that budget is spent (through another
door) or the daily message quota is used up; the others are not held back by the model
budget and start no model work. An entry point without an exercise fails the first test.
"""

from collections.abc import Callable
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.core.cache import cache
from rest_framework.test import APIClient

from accounts import services as account_services
from conversations import services
from conversations.engine import responses, stateless
from conversations.limits import makes_model_work
from tests.support.entry_points import (
    ANY,
    EXPORT,
    OPENAI_UPLOAD,
    UPLOAD,
    Call,
    Exercise,
    World,
    exercise,
    filled,
    frame_entry_points,
    http_call,
    http_entry_points,
    page_views,
    runs_started,
    stored,
    world_build,
)
from tests.support.sockets import connect_as

pytestmark = pytest.mark.usefixtures("redis_url", "fresh_throttles")

C = "/api/v1/conversations/{conversation}"
CONVERSATION = "api/v1/conversations/<str:conversation_id>"
OA = "/openai/v1"
OPENAI_CONVERSATION = "openai/v1/^conversations/(?P<conversation_id>[^/]+)"
OPENAI_RESPONSE = "openai/v1/^responses/(?P<response_id>[^/]+)"
OPENAI_FILE = "openai/v1/^files/(?P<file_id>[^/]+)"
HELLO = [{"role": "user", "content": "Hi"}]
TS = "/api/v1/tool-servers/"
TOOL_SERVER = "api/v1/tool-servers/<str:server_id>"

HTTP: dict[tuple[str, str], Exercise] = {
    ("api/v1/conversations/", "GET"): exercise(Call("GET", "/api/v1/conversations/")),
    ("api/v1/conversations/", "POST"): exercise(
        Call("POST", "/api/v1/conversations/", {"title": "New"})
    ),
    ("api/v1/conversations/import/", "POST"): exercise(
        Call("POST", "/api/v1/conversations/import/", EXPORT)
    ),
    (f"{CONVERSATION}/", "GET"): exercise(Call("GET", f"{C}/")),
    (f"{CONVERSATION}/", "PATCH"): exercise(Call("PATCH", f"{C}/", {"title": "Renamed"})),
    (f"{CONVERSATION}/", "DELETE"): exercise(Call("DELETE", f"{C}/")),
    (f"{CONVERSATION}/messages/", "GET"): exercise(Call("GET", f"{C}/messages/")),
    (f"{CONVERSATION}/messages/", "POST"): exercise(
        Call("POST", f"{C}/messages/", {"content": "Hello?"}),
        invalid=Call("POST", f"{C}/messages/", {"content": "   "}),
    ),
    (f"{CONVERSATION}/messages/<str:message_id>/regenerate/", "POST"): exercise(
        Call("POST", f"{C}/messages/{{reply}}/regenerate/", {}),
        invalid=Call("POST", f"{C}/messages/{{user}}/regenerate/", {}),
    ),
    (f"{CONVERSATION}/messages/<str:message_id>/edit/", "POST"): exercise(
        Call("POST", f"{C}/messages/{{user}}/edit/", {"content": "Edited?"}),
        invalid=Call("POST", f"{C}/messages/{{user}}/edit/", {"content": "   "}),
    ),
    (f"{CONVERSATION}/branches/", "GET"): exercise(Call("GET", f"{C}/branches/")),
    (f"{CONVERSATION}/events/", "POST"): exercise(
        Call("POST", f"{C}/events/", {"content": "User checked in."})
    ),
    (f"{CONVERSATION}/draft/", "PUT"): exercise(Call("PUT", f"{C}/draft/", {"draft": "A draft"})),
    (f"{CONVERSATION}/fork/", "POST"): exercise(Call("POST", f"{C}/fork/", {"at_seq": 1})),
    (f"{CONVERSATION}/export/", "GET"): exercise(Call("GET", f"{C}/export/")),
    (f"{CONVERSATION}/shares/", "GET"): exercise(Call("GET", f"{C}/shares/")),
    (f"{CONVERSATION}/shares/", "POST"): exercise(Call("POST", f"{C}/shares/", {})),
    ("api/v1/shares/", "GET"): exercise(Call("GET", "/api/v1/shares/")),
    ("api/v1/shares/<str:share_id>/", "DELETE"): exercise(
        Call("DELETE", "/api/v1/shares/{share}/")
    ),
    ("api/v1/shared/<str:token>/", "GET"): exercise(Call("GET", "/api/v1/shared/{token}/")),
    ("api/v1/shared/<str:token>/continue/", "POST"): exercise(
        Call("POST", "/api/v1/shared/{token}/continue/")
    ),
    ("api/v1/folders/", "GET"): exercise(Call("GET", "/api/v1/folders/")),
    ("api/v1/folders/", "POST"): exercise(Call("POST", "/api/v1/folders/", {"name": "Work"})),
    ("api/v1/folders/<str:folder_id>/", "PATCH"): exercise(
        Call("PATCH", "/api/v1/folders/{folder}/", {"position": 0})
    ),
    ("api/v1/folders/<str:folder_id>/", "DELETE"): exercise(
        Call("DELETE", "/api/v1/folders/{folder}/")
    ),
    ("api/v1/tags/", "GET"): exercise(Call("GET", "/api/v1/tags/")),
    ("api/v1/runs/<str:run_id>/", "GET"): exercise(Call("GET", "/api/v1/runs/{run}/")),
    ("api/v1/runs/<str:run_id>/cancel/", "POST"): exercise(
        Call("POST", "/api/v1/runs/{run}/cancel/")
    ),
    ("api/v1/runs/<uuid:run_id>/events/", ANY): exercise(Call("GET", "/api/v1/runs/{run}/events/")),
    ("api/v1/search/", "GET"): exercise(Call("GET", "/api/v1/search/?q=cat")),
    ("api/v1/chat/", "POST"): exercise(
        Call("POST", "/api/v1/chat/", {"message": "Hi"}),
        Call("POST", "/api/v1/chat/", {"message": "Hi", "conversation_id": "{conversation}"}),
        invalid=Call("POST", "/api/v1/chat/", {"message": ""}),
    ),
    ("api/v1/stateless/chat/", "POST"): exercise(
        Call("POST", "/api/v1/stateless/chat/", {"messages": HELLO}),
        invalid=Call("POST", "/api/v1/stateless/chat/", {"messages": []}),
    ),
    ("api/v1/api-keys/", "GET"): exercise(Call("GET", "/api/v1/api-keys/")),
    ("api/v1/api-keys/", "POST"): exercise(Call("POST", "/api/v1/api-keys/", {"name": "ci"})),
    ("api/v1/api-keys/<str:key_id>/", "DELETE"): exercise(
        Call("DELETE", "/api/v1/api-keys/{key}/")
    ),
    ("api/v1/tools/", "GET"): exercise(Call("GET", "/api/v1/tools/")),
    ("api/v1/tool-servers/", "GET"): exercise(Call("GET", TS)),
    ("api/v1/tool-servers/", "POST"): exercise(
        Call("POST", TS, {"name": "wiki", "url": "http://wiki.internal/mcp"})
    ),
    (f"{TOOL_SERVER}/", "GET"): exercise(Call("GET", f"{TS}0/")),
    (f"{TOOL_SERVER}/", "PATCH"): exercise(Call("PATCH", f"{TS}0/", {"enabled": False})),
    (f"{TOOL_SERVER}/", "DELETE"): exercise(Call("DELETE", f"{TS}0/")),
    (f"{TOOL_SERVER}/credential/", "PUT"): exercise(
        Call("PUT", f"{TS}0/credential/", {"token": "t0ken"})
    ),
    (f"{TOOL_SERVER}/credential/", "DELETE"): exercise(Call("DELETE", f"{TS}0/credential/")),
    ("api/v1/files/", "GET"): exercise(Call("GET", "/api/v1/files/")),
    ("api/v1/files/", "POST"): exercise(Call("POST", "/api/v1/files/", UPLOAD)),
    ("api/v1/files/<str:file_id>/", "GET"): exercise(Call("GET", "/api/v1/files/{file}/")),
    ("api/v1/files/<str:file_id>/", "DELETE"): exercise(Call("DELETE", "/api/v1/files/{file}/")),
    ("api/v1/files/<str:file_id>/content", "GET"): exercise(
        Call("GET", "/api/v1/files/{file}/content")
    ),
    ("api/v1/^.*$", ANY): exercise(Call("GET", "/api/v1/nowhere/"), spends=False),
    ("api/schema/", "GET"): exercise(Call("GET", "/api/schema/")),
    ("api/docs/", "GET"): exercise(Call("GET", "/api/docs/")),
    ("api/redoc/", "GET"): exercise(Call("GET", "/api/redoc/")),
    ("^api/", ANY): exercise(Call("GET", "/api/nowhere/"), spends=False),
    ("openai/v1/^conversations/?$", "POST"): exercise(
        Call("POST", f"{OA}/conversations", {"metadata": {"topic": "cats"}})
    ),
    (f"{OPENAI_CONVERSATION}/?$", "GET"): exercise(Call("GET", f"{OA}/conversations/{{conv}}")),
    (f"{OPENAI_CONVERSATION}/?$", "POST"): exercise(
        Call("POST", f"{OA}/conversations/{{conv}}", {"metadata": {"topic": "dogs"}})
    ),
    (f"{OPENAI_CONVERSATION}/?$", "DELETE"): exercise(
        Call("DELETE", f"{OA}/conversations/{{conv}}")
    ),
    (f"{OPENAI_CONVERSATION}/items/?$", "GET"): exercise(
        Call("GET", f"{OA}/conversations/{{conv}}/items")
    ),
    (f"{OPENAI_CONVERSATION}/items/?$", "POST"): exercise(
        Call("POST", f"{OA}/conversations/{{conv}}/items", {"items": HELLO})
    ),
    (f"{OPENAI_CONVERSATION}/items/(?P<item_id>[^/]+)/?$", "GET"): exercise(
        Call("GET", f"{OA}/conversations/{{conv}}/items/{{item}}")
    ),
    (f"{OPENAI_CONVERSATION}/items/(?P<item_id>[^/]+)/?$", "DELETE"): exercise(
        Call("DELETE", f"{OA}/conversations/{{conv}}/items/{{item}}")
    ),
    ("openai/v1/^responses/?$", "POST"): exercise(
        Call("POST", f"{OA}/responses", {"model": "m", "input": "Hi", "background": True}),
        Call("POST", f"{OA}/responses", {"model": "m", "input": "Hi", "store": False}),
        Call(
            "POST",
            f"{OA}/responses",
            {"model": "m", "input": "Hi", "conversation": "{conv}", "background": True},
        ),
        # No user message at all: the model works all the same.
        Call(
            "POST",
            f"{OA}/responses",
            {"model": "m", "input": [{"role": "developer", "content": "Say hi."}]},
        ),
        invalid=Call("POST", f"{OA}/responses", {"model": "m"}),
    ),
    ("openai/v1/^responses/compact/?$", "POST"): exercise(
        Call("POST", f"{OA}/responses/compact", {"model": "m", "input": "Hi"}),
        Call("POST", f"{OA}/responses/compact", {"model": "m", "previous_response_id": "{resp}"}),
        invalid=Call("POST", f"{OA}/responses/compact", {"model": "m"}),
    ),
    (f"{OPENAI_RESPONSE}/?$", "GET"): exercise(Call("GET", f"{OA}/responses/{{resp}}")),
    (f"{OPENAI_RESPONSE}/?$", "DELETE"): exercise(Call("DELETE", f"{OA}/responses/{{resp}}")),
    (f"{OPENAI_RESPONSE}/cancel/?$", "POST"): exercise(
        Call("POST", f"{OA}/responses/{{resp}}/cancel")
    ),
    (f"{OPENAI_RESPONSE}/input_items/?$", "GET"): exercise(
        Call("GET", f"{OA}/responses/{{resp}}/input_items")
    ),
    ("openai/v1/^files/?$", "GET"): exercise(Call("GET", f"{OA}/files")),
    ("openai/v1/^files/?$", "POST"): exercise(Call("POST", f"{OA}/files", OPENAI_UPLOAD)),
    (f"{OPENAI_FILE}/?$", "GET"): exercise(Call("GET", f"{OA}/files/{{file_oai}}")),
    (f"{OPENAI_FILE}/?$", "DELETE"): exercise(Call("DELETE", f"{OA}/files/{{file_oai}}")),
    (f"{OPENAI_FILE}/content/?$", "GET"): exercise(Call("GET", f"{OA}/files/{{file_oai}}/content")),
    ("openai/v1/^models/?$", "GET"): exercise(Call("GET", f"{OA}/models")),
    ("openai/v1/^models/(?P<model_id>.+?)/?$", "GET"): exercise(Call("GET", f"{OA}/models/m")),
    ("openai/v1/^.*$", ANY): exercise(Call("GET", f"{OA}/nowhere"), spends=False),
}

FRAMES: dict[str, Exercise] = {
    "message.create": exercise(
        {"type": "message.create", "content": "Hello?"},
        invalid={"type": "message.create", "content": "   "},
    ),
    "message.regenerate": exercise(
        {"type": "message.regenerate", "message_id": "{reply}"},
        invalid={"type": "message.regenerate", "message_id": "{user}"},
    ),
    "message.edit": exercise(
        {"type": "message.edit", "message_id": "{user}", "content": "Edited?"},
        invalid={"type": "message.edit", "message_id": "{user}", "content": "   "},
    ),
    "branch.switch": exercise({"type": "branch.switch", "branch_id": "{branch}"}),
    "run.cancel": exercise({"type": "run.cancel"}),
    "subscribe": exercise({"type": "subscribe", "run_id": "{run}"}),
    "draft.update": exercise({"type": "draft.update", "draft": "A draft"}),
    "ping": exercise({"type": "ping"}),
}

MODEL_HTTP = sorted(key for key, case in HTTP.items() if case.invalid is not None)
OTHER_HTTP = sorted(key for key, case in HTTP.items() if case.invalid is None and case.spends)
MODEL_FRAMES = sorted(kind for kind, case in FRAMES.items() if case.invalid is not None)
OTHER_FRAMES = sorted(kind for kind, case in FRAMES.items() if case.invalid is None)


def test_every_entry_point_is_exercised_as_it_declares():
    assert set(HTTP) == set(http_entry_points())
    assert set(FRAMES) == set(frame_entry_points())
    # An exercise refused by its handler is given exactly for those that make the model
    # work: the tests below hold each entry point to what its handler declares.
    for key, model_work in http_entry_points().items():
        assert (HTTP[key].invalid is not None) is model_work, key
    for kind, model_work in frame_entry_points().items():
        assert (FRAMES[kind].invalid is not None) is model_work, kind


def test_no_page_outside_the_api_doors_makes_the_model_work():
    for route, view in page_views().items():
        cls = getattr(view, "view_class", None)
        handlers = [view, *(vars(cls).values() if cls is not None else ())]
        assert not any(makes_model_work(handler) for handler in handlers), route


# --- the HTTP doors --------------------------------------------------------------------------


class CountedProvider:
    """A provider whose model calls are counted."""

    def __init__(self, real: Any, calls: list[str]) -> None:
        self.real, self.calls = real, calls

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)

    def stream(self, **kwargs: Any) -> Any:
        self.calls.append(kwargs["model"])
        return self.real.stream(**kwargs)


@pytest.fixture
def model_calls(monkeypatch) -> list[str]:
    """The model calls of work kept nowhere (stored runs call it on a worker: `enqueued`)."""
    calls: list[str] = []
    for module in (stateless, responses):
        real = module.provider_get
        monkeypatch.setattr(
            module, "provider_get", lambda real=real: CountedProvider(real(), calls)
        )
    return calls


@pytest.fixture
def world(owner, settings, enqueued, model_calls) -> World:
    settings.PARLEY_CHAT_WAIT_SECONDS = 0
    settings.PARLEY_DEMO_TOKENS_PER_SECOND = 0
    return world_build(owner)


@pytest.fixture
def doors(owner, world) -> Callable[[Any], Any]:
    """A request through its door: /api/ as the web UI sends it (a session, which holds
    every scope), /openai/v1/ with an API key."""
    session = APIClient()
    session.force_login(owner)
    keyed = APIClient()
    _, secret = account_services.api_key_create(owner=owner, name="program")
    keyed.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")

    def call(request: Any) -> Any:
        return http_call(keyed if request.path.startswith(OA) else session, request, world)

    return call


def refusal(response: Any) -> str | None:
    """The code a 429 answer gives. The API's documentation pages answer in their own
    format (HTML, YAML), where only a spent budget can stop them."""
    if response.status_code != 429:
        return None
    if "json" not in response["Content-Type"]:
        return "throttled"
    code: str = response.json()["error"]["code"]
    return code


def door_code(call: Call, code: str) -> str:
    """How a door names a refusal: OpenAI's own code for a spent budget on its door."""
    return "rate_limit_exceeded" if code == "throttled" and call.path.startswith(OA) else code


def assert_throttled(response: Any, call: Call) -> None:
    assert refusal(response) == door_code(call, "throttled"), response.content
    assert int(response["Retry-After"]) >= 1


STATELESS = Call("POST", "/api/v1/stateless/chat/", {"messages": HELLO})
UNSTORED = Call("POST", f"{OA}/responses", {"model": "m", "input": "Hi", "store": False})
TOOLS = Call("GET", "/api/v1/tools/")


def other_door(call: Call) -> Call:
    """Model work through the other HTTP door than `call`'s."""
    return STATELESS if call.path.startswith(OA) else UNSTORED


@pytest.mark.django_db
@pytest.mark.parametrize("key", sorted(HTTP), ids="{0[1]} {0[0]}".format)
def test_every_request_spends_the_user_budget(key, doors, settings):
    case = HTTP[key]
    call = case.calls[0]
    settings.PARLEY_API_THROTTLE_RATE = "1/minute"
    assert refusal(doors(call)) is None
    if not case.spends:  # a path of no endpoint does nothing, spends nothing
        assert doors(TOOLS).status_code == 200
        assert doors(call).status_code == 404
        return
    assert_throttled(doors(TOOLS), TOOLS)
    cache.clear()
    assert doors(TOOLS).status_code == 200
    before = stored()
    assert_throttled(doors(call), call)
    assert stored() == before


@pytest.mark.django_db
@pytest.mark.parametrize("key", MODEL_HTTP, ids="{0[1]} {0[0]}".format)
def test_model_work_spends_the_model_budget_and_stops_when_it_is_spent(
    key, doors, settings, enqueued, model_calls
):
    case = HTTP[key]
    settings.PARLEY_API_MODEL_THROTTLE_RATE = "1/minute"
    # Refused by the handler, after the budgets: it spent the model's.
    answer = doors(case.invalid)
    assert answer.status_code in (400, 404), answer.content
    probe = other_door(case.invalid)
    assert_throttled(doors(probe), probe)
    for call in case.calls:
        before, calls = stored(), len(model_calls)
        assert_throttled(doors(call), call)
        assert stored() == before
        assert (enqueued, len(model_calls)) == ([], calls)


@pytest.mark.django_db
@pytest.mark.parametrize("key", MODEL_HTTP, ids="{0[1]} {0[0]}".format)
def test_model_work_takes_the_daily_message_quota(
    key, doors, owner, settings, enqueued, model_calls
):
    settings.PARLEY_MAX_MESSAGES_PER_DAY = 1
    elsewhere = services.conversation_create(owner=owner)
    services.user_message_append(conversation=elsewhere, content="The day's one message.")
    for call in HTTP[key].calls:
        before, calls = stored(), len(model_calls)
        answer = doors(call)
        assert refusal(answer) == "message_quota_exceeded", answer.content
        assert stored() == before
        assert (enqueued, len(model_calls)) == ([], calls)


@pytest.mark.django_db
@pytest.mark.parametrize("key", OTHER_HTTP, ids="{0[1]} {0[0]}".format)
def test_other_requests_neither_wait_for_the_model_budget_nor_make_the_model_work(
    key, doors, settings, enqueued, model_calls
):
    settings.PARLEY_API_MODEL_THROTTLE_RATE = "1/minute"
    call = HTTP[key].calls[0]
    assert doors(other_door(call)).status_code == 200
    assert model_calls  # the count sees model calls
    runs, calls = {pk for pk, _ in stored()[3]}, len(model_calls)
    assert refusal(doors(call)) is None
    assert not runs_started(runs)
    assert (enqueued, len(model_calls)) == ([], calls)


# --- the websocket -----------------------------------------------------------------------------


@pytest.fixture
async def socket_world(owner, settings, enqueued, model_calls) -> World:
    settings.PARLEY_DEMO_TOKENS_PER_SECOND = 0
    return await sync_to_async(world_build)(owner)


@pytest.fixture
def rest(owner, socket_world) -> Callable[[Call], Any]:
    """A request of the web UI's session, from async code."""
    session = APIClient()
    session.force_login(owner)
    return sync_to_async(lambda call: http_call(session, call, socket_world))


async def frames_until(ws, done: Callable[[dict[str, Any]], bool]) -> list[dict[str, Any]]:
    seen = []
    while True:
        frame = await ws.receive_json_from(timeout=5)
        seen.append(frame)
        if done(frame):
            return seen


def is_error(frame: dict[str, Any]) -> bool:
    return frame["type"] == "error"


def is_throttled(frame: dict[str, Any]) -> bool:
    return frame["type"] == "error" and frame["code"] == "throttled"


async def frame_refused(ws, frame: dict[str, Any]) -> dict[str, Any]:
    """The error frame `frame` gets, having stored nothing."""
    before = await sync_to_async(stored)()
    await ws.send_json_to(frame)
    error = (await frames_until(ws, is_error))[-1]
    assert await sync_to_async(stored)() == before
    return error


@pytest.mark.parametrize("kind", sorted(FRAMES))
@pytest.mark.django_db(transaction=True)
async def test_every_frame_spends_the_user_budget(kind, owner, socket_world, rest, settings):
    settings.PARLEY_API_THROTTLE_RATE = "2/minute"
    frame = filled(FRAMES[kind].calls[0], socket_world.ids)
    ws = await connect_as(owner, socket_world.conversation.pk)
    for sent in (frame, {"type": "ping"}, {"type": "ping"}):
        await ws.send_json_to(sent)
    seen = await frames_until(ws, is_throttled)
    # The frame and one ping answered, the other ping refused: the frame spent one.
    assert [f["type"] for f in seen].count("pong") == 1 + (kind == "ping"), seen
    cache.clear()
    for _ in range(2):
        assert (await rest(TOOLS)).status_code == 200
    error = await frame_refused(ws, frame)
    assert error["code"] == "throttled"
    assert error["retry_after"] >= 1
    await ws.disconnect()


@pytest.mark.parametrize("kind", MODEL_FRAMES)
@pytest.mark.django_db(transaction=True)
async def test_model_frames_spend_the_model_budget_and_stop_when_it_is_spent(
    kind, owner, socket_world, rest, settings, enqueued
):
    settings.PARLEY_API_MODEL_THROTTLE_RATE = "1/minute"
    ids = socket_world.ids
    ws = await connect_as(owner, socket_world.conversation.pk)
    await ws.send_json_to(filled(FRAMES[kind].invalid, ids))
    refused = (await frames_until(ws, is_error))[-1]
    assert refused["code"] in ("invalid", "not_found"), refused
    assert refusal(await rest(STATELESS)) == "throttled"
    for frame in FRAMES[kind].calls:
        error = await frame_refused(ws, filled(frame, ids))
        assert (error["code"], enqueued) == ("throttled", [])
        assert error["retry_after"] >= 1
    await ws.disconnect()


@pytest.mark.parametrize("kind", MODEL_FRAMES)
@pytest.mark.django_db(transaction=True)
async def test_model_frames_take_the_daily_message_quota(
    kind, owner, socket_world, settings, enqueued
):
    settings.PARLEY_MAX_MESSAGES_PER_DAY = 1
    elsewhere = await sync_to_async(services.conversation_create)(owner=owner)
    await sync_to_async(services.user_message_append)(conversation=elsewhere, content="One.")
    ws = await connect_as(owner, socket_world.conversation.pk)
    for frame in FRAMES[kind].calls:
        error = await frame_refused(ws, filled(frame, socket_world.ids))
        assert (error["code"], enqueued) == ("message_quota_exceeded", [])
    await ws.disconnect()


@pytest.mark.parametrize("kind", OTHER_FRAMES)
@pytest.mark.django_db(transaction=True)
async def test_other_frames_neither_wait_for_the_model_budget_nor_make_the_model_work(
    kind, owner, socket_world, rest, settings, enqueued, model_calls
):
    settings.PARLEY_API_MODEL_THROTTLE_RATE = "1/minute"
    assert (await rest(STATELESS)).status_code == 200
    runs, calls = {pk for pk, _ in (await sync_to_async(stored)())[3]}, len(model_calls)
    ws = await connect_as(owner, socket_world.conversation.pk)
    await ws.send_json_to(filled(FRAMES[kind].calls[0], socket_world.ids))
    await ws.send_json_to({"type": "ping"})
    seen = await frames_until(ws, lambda frame: frame["type"] == "pong")
    assert not any(is_throttled(frame) for frame in seen), seen
    assert not await sync_to_async(runs_started)(runs)
    assert (enqueued, len(model_calls)) == ([], calls)
    await ws.disconnect()
