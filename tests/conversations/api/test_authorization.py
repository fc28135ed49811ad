"""The authorization matrix, over every endpoint and method of the OpenAPI schema.

Actors: the owner by session and by API key, another user by session and by key, the
owner's revoked key, and nobody. Another user's objects answer 404 (never 403: no
existence leak); what another user may create or list is their own and never shows the
owner's data.
"""

import json
from dataclasses import dataclass, field
from typing import Any

import pytest
from drf_spectacular.generators import SchemaGenerator
from rest_framework.test import APIClient

from accounts import services as account_services
from conversations import services
from conversations.engine import eventlog
from conversations.formats import exporting
from conversations.models import Conversation, Message, Run
from conversations.serializers import run_payload
from tests.support.api import error_of
from tests.support.files import file_make, upload
from tests.support.tool_servers import listings_fake, member_of, server_make

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("redis_url")]

ACTORS = ["owner_session", "owner_key", "other_session", "other_key", "revoked_key", "anonymous"]
METHODS = ["get", "post", "put", "patch", "delete"]


@dataclass
class World:
    owner: Any
    outsider: Any
    conversation: Conversation
    run: Run
    key_id: str
    file_id: str
    server_id: str
    share_id: str
    folder_id: str
    export: bytes
    clients: dict[str, APIClient] = field(default_factory=dict)


@pytest.fixture
def world(owner, outsider, as_user, with_key, settings, monkeypatch) -> World:
    settings.PARLEY_CHAT_WAIT_SECONDS = 0
    settings.PARLEY_DEMO_TOKENS_PER_SECOND = 0
    conversation = services.conversation_create(owner=owner, title="Secret plans")
    services.messages_append(
        conversation=conversation,
        messages=[
            services.NewMessage(role="user", content="the launch code is swordfish"),
            services.NewMessage(role="assistant", content="Noted."),
        ],
    )
    run = Run.objects.create(conversation=conversation, status="completed")
    writer = eventlog.EventWriter(str(run.pk))
    writer.emit("run.created", run=run_payload(run))
    writer.emit("run.completed", run=run_payload(run))
    key, _ = account_services.api_key_create(owner=owner, name="laptop")
    revoked, revoked_secret = account_services.api_key_create(owner=owner, name="old")
    account_services.api_key_revoke(api_key=revoked)
    stored = file_make(owner, b"the launch code is swordfish", "secret.txt")
    revoked_client = APIClient()
    revoked_client.credentials(HTTP_AUTHORIZATION=f"Bearer {revoked_secret}")
    listings_fake(monkeypatch)
    server = server_make("planning", auth="per_user", groups=["planners"])
    share, _ = services.share_create(conversation=conversation, user=owner)
    folder = services.folder_create(owner=owner, name="Secret plans folder")
    services.conversation_organise(
        conversation=conversation, folder_id=folder.pk, tags=["Secret plans tag"]
    )
    member_of(owner, "planners")
    return World(
        owner=owner,
        outsider=outsider,
        conversation=conversation,
        run=run,
        key_id=str(key.pk),
        file_id=str(stored.pk),
        server_id=str(server.pk),
        share_id=str(share.pk),
        folder_id=str(folder.pk),
        export="".join(exporting.export_json_chunks(conversation)).encode(),
        clients={
            "owner_session": as_user(owner),
            "owner_key": with_key(owner),
            "other_session": as_user(outsider),
            "other_key": with_key(outsider),
            "revoked_key": revoked_client,
            "anonymous": APIClient(),
        },
    )


@dataclass(frozen=True)
class Case:
    owner: int  # the owner's status
    other: int  # another user's status
    body: Any = None


C = "/api/v1/conversations/{conversation_id}"
TS = "/api/v1/tool-servers/{server_id}"
# Every documented operation, with what the owner and another user get.
MATRIX: dict[tuple[str, str], Case] = {
    ("get", "/api/v1/conversations/"): Case(200, 200),
    ("post", "/api/v1/conversations/"): Case(201, 201, {"title": "New"}),
    ("get", f"{C}/"): Case(200, 404),
    ("patch", f"{C}/"): Case(200, 404, {"title": "Renamed"}),
    ("delete", f"{C}/"): Case(204, 404),
    ("get", f"{C}/messages/"): Case(200, 404),
    ("post", f"{C}/messages/"): Case(202, 404, {"content": "Hello?"}),
    ("post", f"{C}/events/"): Case(201, 404, {"content": "User checked in."}),
    ("put", f"{C}/draft/"): Case(200, 404, {"draft": "A new draft"}),
    ("post", f"{C}/fork/"): Case(201, 404, {"at_seq": 1}),
    ("post", f"{C}/messages/{{message_id}}/regenerate/"): Case(202, 404, {}),
    ("post", f"{C}/messages/{{message_id}}/edit/"): Case(202, 404, {"content": "Edited?"}),
    ("get", f"{C}/branches/"): Case(200, 404),
    ("get", f"{C}/export/"): Case(200, 404),
    ("post", "/api/v1/conversations/import/"): Case(201, 201, "export"),
    ("get", "/api/v1/runs/{run_id}/"): Case(200, 404),
    ("post", "/api/v1/runs/{run_id}/cancel/"): Case(200, 404),
    ("get", "/api/v1/runs/{run_id}/events/"): Case(200, 404),
    ("get", "/api/v1/search/"): Case(200, 200),
    ("post", "/api/v1/chat/"): Case(202, 404, {"message": "Hi", "conversation_id": "{cid}"}),
    ("post", "/api/v1/stateless/chat/"): Case(
        200, 200, {"messages": [{"role": "user", "content": "Hi"}]}
    ),
    ("get", "/api/v1/api-keys/"): Case(200, 200),
    ("post", "/api/v1/api-keys/"): Case(201, 201, {"name": "ci"}),
    ("delete", "/api/v1/api-keys/{key_id}/"): Case(204, 404),
    ("get", "/api/v1/tools/"): Case(200, 200),
    ("get", "/api/v1/files/"): Case(200, 200),
    ("post", "/api/v1/files/"): Case(201, 201, "upload"),
    ("get", "/api/v1/files/{file_id}/"): Case(200, 404),
    ("delete", "/api/v1/files/{file_id}/"): Case(204, 404),
    ("get", "/api/v1/files/{file_id}/content"): Case(200, 404),
    # A server open to the owner's group only; neither user is staff.
    ("get", "/api/v1/tool-servers/"): Case(200, 200),
    ("post", "/api/v1/tool-servers/"): Case(403, 403, {"name": "x", "url": "http://x/mcp"}),
    ("get", f"{TS}/"): Case(200, 404),
    ("patch", f"{TS}/"): Case(403, 404, {"enabled": False}),
    ("delete", f"{TS}/"): Case(403, 404),
    ("put", f"{TS}/credential/"): Case(200, 404, {"token": "t0ken"}),
    ("delete", f"{TS}/credential/"): Case(200, 404),
    ("get", f"{C}/shares/"): Case(200, 404),
    ("post", f"{C}/shares/"): Case(201, 404, {"audience": "signed_in"}),
    ("get", "/api/v1/shares/"): Case(200, 200),
    ("delete", "/api/v1/shares/{share_id}/"): Case(204, 404),
    ("get", "/api/v1/folders/"): Case(200, 200),
    ("post", "/api/v1/folders/"): Case(201, 201, {"name": "Plans"}),
    ("patch", "/api/v1/folders/{folder_id}/"): Case(200, 404, {"name": "Renamed"}),
    ("delete", "/api/v1/folders/{folder_id}/"): Case(204, 404),
    ("get", "/api/v1/tags/"): Case(200, 200),
}
# Opened by a link's token, not by who asks: anyone holding a `public` link may read it,
# so they are not cases of this matrix (tests/conversations/api/test_shares.py).
BY_TOKEN = {
    ("get", "/api/v1/shared/{token}/"),
    ("post", "/api/v1/shared/{token}/continue/"),
}


def documented_operations() -> set[tuple[str, str]]:
    schema = SchemaGenerator().get_schema(request=None, public=True)
    from conversations.api.schema import postprocess

    schema = postprocess(schema, None, None, True)
    return {
        (method, path)
        for path, operations in schema["paths"].items()
        for method in operations
        if method in METHODS
    }


def test_the_matrix_covers_every_documented_operation():
    assert documented_operations() == set(MATRIX) | BY_TOKEN


def _url(path: str, world: World) -> str:
    # A reply is what can be regenerated, a user message what can be edited.
    role = "user" if path.endswith("/edit/") else "assistant"
    message = Message.objects.get(conversation=world.conversation, role=role)
    url = path.format(
        conversation_id=world.conversation.pk,
        run_id=world.run.pk,
        key_id=world.key_id,
        message_id=message.pk,
        file_id=world.file_id,
        server_id=world.server_id,
        share_id=world.share_id,
        folder_id=world.folder_id,
    )
    return url + "?q=swordfish" if url.endswith("/search/") else url


def _call(client: APIClient, method: str, url: str, body: Any, world: World) -> Any:
    if body == "export":
        return client.post(url, world.export, content_type="application/json")
    if body == "upload":
        return upload(client, b"A new file.", "new.txt")
    if body is None:
        return getattr(client, method)(url)
    data = json.loads(json.dumps(body).replace("{cid}", str(world.conversation.pk)))
    return getattr(client, method)(url, data, format="json")


def _operations() -> list[Any]:
    # The async SSE view reads the database from a helper thread (config/async_db.py),
    # which only sees committed rows: that case runs in a committed transaction.
    transactional = pytest.mark.django_db(transaction=True)
    return [
        pytest.param(
            method,
            path,
            marks=transactional
            if path.endswith("/events/") and path.startswith("/api/v1/runs/")
            else (),
        )
        for method, path in sorted(MATRIX)
    ]


@pytest.mark.parametrize("actor", ACTORS)
@pytest.mark.parametrize(("method", "path"), _operations())
def test_authorization(world, actor, method, path):
    case = MATRIX[(method, path)]
    response = _call(world.clients[actor], method, _url(path, world), case.body, world)

    if actor in ("revoked_key", "anonymous"):
        assert response.status_code == 401
        assert error_of(response)["code"] in ("not_authenticated", "authentication_failed")
        return
    expected = case.owner if actor.startswith("owner") else case.other
    assert response.status_code == expected, response.content[:300]
    if expected == 404:
        assert error_of(response)["code"] == "not_found"
    if actor.startswith("other"):
        # Whatever another user may do, the owner's data never comes back to them.
        if not getattr(response, "streaming", False):
            assert b"swordfish" not in response.content
            assert b"Secret plans" not in response.content or body_is_their_import(case)
        world.conversation.refresh_from_db()
        assert world.conversation.title == "Secret plans"
        assert Message.objects.filter(conversation=world.conversation).count() == 2


def body_is_their_import(case: Case) -> bool:
    # Importing a document they hold copies its title into their own conversation.
    return case.body == "export"


@pytest.mark.parametrize("path", sorted({path for _, path in MATRIX}))
def test_methods_not_documented_answer_405_in_json(world, path):
    documented = {m for (m, p) in MATRIX if p == path}
    client = world.clients["owner_session"]
    for other in sorted(set(METHODS) - documented):
        response = getattr(client, other)(_url(path, world))
        assert response.status_code == 405, (other, path)
        assert error_of(response)["code"] == "method_not_allowed"


def test_the_first_key_can_be_made_with_username_and_password_only_there(owner):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Basic " + _basic("alice", "pw-alice-123"))
    created = client.post("/api/v1/api-keys/", {"name": "cli"}, format="json")
    assert created.status_code == 201
    assert created.json()["key"].startswith("prl_")
    # A password is no way into anything else.
    assert client.get("/api/v1/conversations/").status_code == 401
    wrong = APIClient()
    wrong.credentials(HTTP_AUTHORIZATION="Basic " + _basic("alice", "wrong"))
    assert wrong.post("/api/v1/api-keys/", {"name": "x"}, format="json").status_code == 401


def test_password_guessing_is_cut_off_after_ten_failures(owner):
    from django.core.cache import cache

    cache.clear()
    guesser = APIClient()
    guesser.credentials(HTTP_AUTHORIZATION="Basic " + _basic("alice", "wrong"))
    answers = [guesser.get("/api/v1/api-keys/").status_code for _ in range(11)]
    assert answers == [401] * 10 + [429]
    assert error_of(guesser.get("/api/v1/api-keys/"))["code"] == "throttled"
    # Past the cap even the right password is refused, so guessing reveals nothing...
    right = APIClient()
    right.credentials(HTTP_AUTHORIZATION="Basic " + _basic("alice", "pw-alice-123"))
    assert right.get("/api/v1/api-keys/").status_code == 429
    # ...while the account's API keys keep working.
    _, secret = account_services.api_key_create(owner=owner, name="k", scopes=["keys"])
    keyed = APIClient()
    keyed.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    assert keyed.get("/api/v1/api-keys/").status_code == 200
    cache.clear()


def _basic(username: str, password: str) -> str:
    import base64

    return base64.b64encode(f"{username}:{password}".encode()).decode()
