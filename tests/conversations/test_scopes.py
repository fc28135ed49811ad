"""API key scopes at every door: each endpoint of the URL conf and each websocket frame
type needs a scope, named in the tables below; a key without it is refused with 403
`insufficient_scope` (an `error` frame on the socket), a key with it is let through.

A new endpoint or frame type fails the coverage tests until its scope is written here.
"""

from collections.abc import Iterator
from typing import Any

import httpx2 as httpx
import openai
import pytest
from asgiref.sync import sync_to_async
from django.contrib.auth.models import Permission
from django.urls import URLPattern, URLResolver, get_resolver, resolve
from rest_framework.test import APIClient

from accounts import services as account_services
from accounts.models import User
from accounts.permissions import ScopedPermission, view_scope
from conversations.api.errors import api_not_found
from conversations.consumers.frames import CONNECT_SCOPE, FrameHandlers
from conversations.openai_api.errors import unknown_url
from tests.support.api import error_of
from tests.support.openai_api import BASE, body_of
from tests.support.sockets import assert_closed_with, open_socket, socket

CHAT, READ, KEYS = "chat", "read", "keys"
# A key holding the scope alone (`chat` comes with `read`), and one holding all others.
HOLDING = {CHAT: [CHAT], READ: [READ], KEYS: [KEYS]}
LACKING = {CHAT: [READ, KEYS], READ: [KEYS], KEYS: [CHAT, READ]}

# Fixed, so every test process collects the same test ids; no row has it.
ID = "8f0c6a52-4d0e-4c1b-9a7e-2f5d3b1e6c90"
C = f"/api/v1/conversations/{ID}"
OAI = "/openai/v1"
# Every endpoint and method, with a path that reaches it, and the scope it needs.
ENDPOINTS: dict[tuple[str, str], str] = {
    ("GET", "/api/v1/conversations/"): READ,
    ("POST", "/api/v1/conversations/"): CHAT,
    ("POST", "/api/v1/conversations/import/"): CHAT,
    ("GET", f"{C}/"): READ,
    ("PATCH", f"{C}/"): CHAT,
    ("DELETE", f"{C}/"): CHAT,
    ("GET", f"{C}/messages/"): READ,
    ("POST", f"{C}/messages/"): CHAT,
    ("POST", f"{C}/messages/{ID}/regenerate/"): CHAT,
    ("POST", f"{C}/messages/{ID}/edit/"): CHAT,
    ("GET", f"{C}/branches/"): READ,
    ("POST", f"{C}/events/"): CHAT,
    ("PUT", f"{C}/draft/"): CHAT,
    ("POST", f"{C}/fork/"): CHAT,
    ("GET", f"{C}/export/"): READ,
    ("GET", f"{C}/shares/"): READ,
    ("POST", f"{C}/shares/"): CHAT,
    ("GET", "/api/v1/shares/"): READ,
    ("DELETE", f"/api/v1/shares/{ID}/"): CHAT,
    ("GET", "/api/v1/shared/no-such-token/"): READ,
    ("POST", "/api/v1/shared/no-such-token/continue/"): CHAT,
    ("GET", "/api/v1/folders/"): READ,
    ("POST", "/api/v1/folders/"): CHAT,
    ("PATCH", f"/api/v1/folders/{ID}/"): CHAT,
    ("DELETE", f"/api/v1/folders/{ID}/"): CHAT,
    ("GET", "/api/v1/tags/"): READ,
    ("GET", f"/api/v1/runs/{ID}/"): READ,
    ("POST", f"/api/v1/runs/{ID}/cancel/"): CHAT,
    ("GET", f"/api/v1/runs/{ID}/events/"): READ,
    ("GET", "/api/v1/search/"): READ,
    ("POST", "/api/v1/chat/"): CHAT,
    ("POST", "/api/v1/stateless/chat/"): CHAT,
    ("GET", "/api/v1/api-keys/"): KEYS,
    ("POST", "/api/v1/api-keys/"): KEYS,
    ("DELETE", f"/api/v1/api-keys/{ID}/"): KEYS,
    ("GET", "/api/v1/tools/"): READ,
    ("GET", "/api/v1/tool-servers/"): READ,
    ("POST", "/api/v1/tool-servers/"): CHAT,
    ("GET", f"/api/v1/tool-servers/{ID}/"): READ,
    ("PATCH", f"/api/v1/tool-servers/{ID}/"): CHAT,
    ("DELETE", f"/api/v1/tool-servers/{ID}/"): CHAT,
    ("PUT", f"/api/v1/tool-servers/{ID}/credential/"): CHAT,
    ("DELETE", f"/api/v1/tool-servers/{ID}/credential/"): CHAT,
    ("GET", "/api/v1/files/"): READ,
    ("POST", "/api/v1/files/"): CHAT,
    ("GET", f"/api/v1/files/{ID}/"): READ,
    ("DELETE", f"/api/v1/files/{ID}/"): CHAT,
    ("GET", f"/api/v1/files/{ID}/content"): READ,
    ("POST", f"{OAI}/conversations"): CHAT,
    ("GET", f"{OAI}/conversations/conv_x"): READ,
    ("POST", f"{OAI}/conversations/conv_x"): CHAT,
    ("DELETE", f"{OAI}/conversations/conv_x"): CHAT,
    ("GET", f"{OAI}/conversations/conv_x/items"): READ,
    ("POST", f"{OAI}/conversations/conv_x/items"): CHAT,
    ("GET", f"{OAI}/conversations/conv_x/items/msg_x"): READ,
    ("DELETE", f"{OAI}/conversations/conv_x/items/msg_x"): CHAT,
    ("POST", f"{OAI}/responses"): CHAT,
    ("POST", f"{OAI}/responses/compact"): CHAT,
    ("GET", f"{OAI}/responses/resp_x"): READ,
    ("DELETE", f"{OAI}/responses/resp_x"): CHAT,
    ("POST", f"{OAI}/responses/resp_x/cancel"): CHAT,
    ("GET", f"{OAI}/responses/resp_x/input_items"): READ,
    ("GET", f"{OAI}/files"): READ,
    ("POST", f"{OAI}/files"): CHAT,
    ("GET", f"{OAI}/files/file-x"): READ,
    ("DELETE", f"{OAI}/files/file-x"): CHAT,
    ("GET", f"{OAI}/files/file-x/content"): READ,
    ("GET", f"{OAI}/models"): READ,
    ("GET", f"{OAI}/models/some-model"): READ,
}
# Staff only: the key's owner is given the permission, so that only the scope refuses.
STAFF_PERMISSIONS = {("POST", "/api/v1/tool-servers/"): "add_toolserver"}
# Answer any path that matches no endpoint, to anyone: nothing to read or write.
CATCH_ALLS = {api_not_found, unknown_url}
# Every frame type a socket takes, and the scope it needs.
FRAMES: dict[str, str] = {
    "message.create": CHAT,
    "message.regenerate": CHAT,
    "message.edit": CHAT,
    "branch.switch": CHAT,
    "run.cancel": CHAT,
    "draft.update": CHAT,
    "subscribe": READ,
    "ping": READ,
}
METHODS = ("get", "post", "put", "patch", "delete")


def url_patterns(patterns: list[Any] | None = None, prefix: str = "") -> Iterator[tuple[str, Any]]:
    for entry in get_resolver().url_patterns if patterns is None else patterns:
        if isinstance(entry, URLResolver):
            yield from url_patterns(entry.url_patterns, prefix + str(entry.pattern))
        elif isinstance(entry, URLPattern):
            yield prefix + str(entry.pattern), entry.callback


def api_endpoints() -> Iterator[tuple[str, Any, str]]:
    """(route, view, method) of every endpoint of /api/v1/ and /openai/v1/."""
    for route, callback in url_patterns():
        if not route.startswith(("api/v1/", "openai/v1/")) or callback in CATCH_ALLS:
            continue
        view_class = getattr(callback, "cls", None)
        if view_class is None:  # a plain Django view: GET only (the SSE stream)
            yield route, callback, "GET"
            continue
        for method in METHODS:
            if hasattr(view_class, method):
                yield route, callback, method.upper()


def declared_scope(callback: Any, method: str) -> str:
    """The scope the view itself demands: through ScopedPermission for DRF views, by its
    own check (named `required_scope`) for a plain one."""
    view_class = getattr(callback, "cls", None)
    if view_class is None:
        return str(callback.required_scope)
    permissions = [type(p) for p in view_class().get_permissions()]
    assert ScopedPermission in permissions, f"{view_class.__name__} skips the scope check"
    return view_scope(view_class, method)


def test_every_endpoint_of_the_url_conf_declares_or_derives_its_scope():
    listed = {(method, resolve(path).func): scope for (method, path), scope in ENDPOINTS.items()}
    seen = set()
    for route, callback, method in api_endpoints():
        key = (method, callback)
        assert key in listed, f"{method} {route}: write its scope in ENDPOINTS"
        assert declared_scope(callback, method) == listed[key], f"{method} {route}"
        seen.add(key)
    assert set(listed) == seen, "ENDPOINTS names paths no endpoint answers"


def test_every_frame_type_declares_its_scope():
    handlers = FrameHandlers()._handlers()
    assert set(handlers) == set(FRAMES)
    for name, handler in handlers.items():
        assert getattr(handler, "required_scope", None) == FRAMES[name], name
    assert CONNECT_SCOPE == READ


# --- through the doors ------------------------------------------------------------------------


def key_client(user: User, scopes: list[str]) -> APIClient:
    _, secret = account_services.api_key_create(owner=user, name="k", scopes=scopes)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    return client


def call(client: APIClient, method: str, path: str) -> Any:
    """The request with an empty JSON object as the body where the method takes one."""
    body = "{}" if method in ("POST", "PUT", "PATCH") else ""
    return client.generic(method, path, data=body, content_type="application/json")


def scope_refused(response: Any) -> bool:
    if response.status_code != 403:
        return False
    body = response.json()["error"]
    return body["code"] == "insufficient_scope"


def endpoint_cases() -> list[Any]:
    # The SSE stream reads its key on another thread, which sees committed rows only.
    threaded = pytest.mark.django_db(transaction=True)
    return [
        pytest.param(
            method,
            path,
            id=f"{method} {path}",
            marks=threaded
            if path.endswith("/events/") and method == "GET"
            else pytest.mark.django_db,
        )
        for method, path in ENDPOINTS
    ]


@pytest.mark.usefixtures("fresh_throttles")
@pytest.mark.parametrize(("method", "path"), endpoint_cases())
def test_each_endpoint_refuses_a_key_without_its_scope_and_admits_one_with_it(owner, method, path):
    scope = ENDPOINTS[(method, path)]
    if (method, path) in STAFF_PERMISSIONS:
        User.objects.filter(pk=owner.pk).update(is_staff=True)
        codename = STAFF_PERMISSIONS[(method, path)]
        owner.user_permissions.add(Permission.objects.get(codename=codename))
    refused = call(key_client(owner, LACKING[scope]), method, path)
    assert scope_refused(refused), (refused.status_code, refused.content[:300])
    if path.startswith("/api/"):
        assert error_of(refused)["details"] == {"required_scope": scope}
    else:
        assert refused.json()["error"]["type"] == "invalid_request_error"
    admitted = call(key_client(owner, HOLDING[scope]), method, path)
    assert not scope_refused(admitted)
    assert admitted.status_code not in (401, 403)


@pytest.mark.django_db
@pytest.mark.usefixtures("fresh_throttles")
def test_a_read_key_cannot_send_a_message_but_reads_the_conversation(owner, conversation):
    client = key_client(owner, [READ])
    url = f"/api/v1/conversations/{conversation.pk}/messages/"
    sent = client.post(url, {"content": "hi"}, format="json")
    assert sent.status_code == 403
    assert error_of(sent)["code"] == "insufficient_scope"
    assert client.get(url).status_code == 200
    assert client.get(f"/api/v1/conversations/{conversation.pk}/").status_code == 200
    conversation.refresh_from_db()
    assert conversation.message_count == 0


@pytest.mark.django_db
@pytest.mark.usefixtures("fresh_throttles")
def test_a_read_key_gets_the_sdks_permission_error_on_responses(owner, wsgi_app):
    _, secret = account_services.api_key_create(owner=owner, name="sdk", scopes=[READ])
    client = openai.OpenAI(
        base_url=BASE,
        api_key=secret,
        http_client=httpx.Client(transport=wsgi_app),
        max_retries=0,
    )
    with pytest.raises(openai.PermissionDeniedError) as refused:
        client.responses.create(model="demo", input="hi", store=False)
    assert body_of(refused.value)["code"] == "insufficient_scope"
    assert [m.id for m in client.models.list()]  # reading is allowed


# --- the websocket ----------------------------------------------------------------------------

socket_test = pytest.mark.usefixtures("redis_url", "close_thread_connections")


def key_headers(user: User, scopes: list[str]) -> tuple[bytes, bytes]:
    _, secret = account_services.api_key_create(owner=user, name="bot", scopes=scopes)
    return (b"authorization", f"Bearer {secret}".encode())


CHAT_FRAMES: list[dict[str, Any]] = [
    {"type": "message.create", "content": "hi"},
    {"type": "message.regenerate", "message_id": ID},
    {"type": "message.edit", "message_id": ID, "content": "hi"},
    {"type": "branch.switch", "branch_id": ID},
    {"type": "run.cancel"},
    {"type": "draft.update", "draft": "d"},
]


@pytest.mark.parametrize("frame", CHAT_FRAMES, ids=[f["type"] for f in CHAT_FRAMES])
@pytest.mark.django_db(transaction=True)
@socket_test
async def test_a_read_key_socket_is_refused_every_writing_frame_and_stays_open(
    owner, conversation, frame
):
    headers = await sync_to_async(key_headers)(owner, [READ])
    ws = await open_socket(conversation.pk, headers)
    await ws.send_json_to(frame)
    error = await ws.receive_json_from(timeout=5)
    assert error["type"] == "error"
    assert (error["code"], error["required_scope"]) == ("insufficient_scope", CHAT)
    # Reading frames still work on the same socket.
    await ws.send_json_to({"type": "subscribe", "run_id": ID})
    assert (await ws.receive_json_from(timeout=5))["code"] == "not_found"
    await ws.send_json_to({"type": "ping"})
    assert await ws.receive_json_from(timeout=5) == {"type": "pong"}
    await ws.disconnect()
    await sync_to_async(conversation.refresh_from_db)()
    assert (conversation.message_count, conversation.draft) == (0, "")


@pytest.mark.django_db(transaction=True)
@socket_test
async def test_a_keys_only_key_socket_is_told_and_closed_4403(owner, conversation):
    headers = await sync_to_async(key_headers)(owner, [KEYS])
    ws = socket(conversation.pk, headers)
    connected, _ = await ws.connect()
    assert connected
    error = await ws.receive_json_from(timeout=5)
    assert (error["type"], error["code"], error["required_scope"]) == (
        "error",
        "insufficient_scope",
        READ,
    )
    assert await ws.receive_output(timeout=5) == {"type": "websocket.close", "code": 4403}


@pytest.mark.django_db(transaction=True)
@socket_test
async def test_a_keys_only_key_is_closed_the_same_on_another_users_conversation(
    outsider, conversation
):
    """No conversation is looked up for a key that may not read: ids reveal nothing."""
    headers = await sync_to_async(key_headers)(outsider, [KEYS])
    ws = socket(conversation.pk, headers)
    connected, _ = await ws.connect()
    assert connected
    assert (await ws.receive_json_from(timeout=5))["code"] == "insufficient_scope"
    assert await ws.receive_output(timeout=5) == {"type": "websocket.close", "code": 4403}


@pytest.mark.django_db(transaction=True)
@socket_test
async def test_a_chat_key_socket_sends_messages(owner, conversation):
    headers = await sync_to_async(key_headers)(owner, [CHAT])
    ws = await open_socket(conversation.pk, headers)
    await ws.send_json_to({"type": "draft.update", "draft": "kept"})
    await ws.send_json_to({"type": "ping"})
    # The draft's own notification may come first; no error does.
    frames: list[dict[str, Any]] = []
    while not frames or frames[-1]["type"] != "pong":
        frames.append(await ws.receive_json_from(timeout=5))
    assert all(f["type"] != "error" for f in frames), frames
    await ws.disconnect()
    await sync_to_async(conversation.refresh_from_db)()
    assert conversation.draft == "kept"


@pytest.mark.django_db(transaction=True)
@socket_test
async def test_revoking_a_key_closes_the_sockets_of_the_keys_it_created(owner, conversation):
    def keys() -> tuple[Any, tuple[bytes, bytes]]:
        parent, _ = account_services.api_key_create(owner=owner, name="parent", scopes=[KEYS, READ])
        _, secret = account_services.api_key_create(
            owner=owner, name="child", scopes=[READ], created_by=parent
        )
        return parent, (b"authorization", f"Bearer {secret}".encode())

    parent, headers = await sync_to_async(keys)()
    ws = await open_socket(conversation.pk, headers)
    await sync_to_async(account_services.api_key_revoke)(api_key=parent)
    assert await ws.receive_output(timeout=2) == {"type": "websocket.close", "code": 4401}
    await assert_closed_with(socket(conversation.pk, headers), 4401)
