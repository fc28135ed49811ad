"""`tool-servers/`: the servers open to each user with their tools, each user's own token
(answered only as `credential_set`), staff registering, changing and removing servers;
a server not open to the caller is 404 on every URL, and no answer or log holds a
secret."""

import json
import logging
from collections.abc import Callable
from typing import Any

import pytest
from rest_framework.test import APIClient

from accounts.models import User
from conversations import selectors
from conversations.models import AuditEvent, ToolCredential, ToolServer
from tests.support.api import error_of
from tests.support.tool_servers import (
    ALICE_TOKEN,
    BOB_TOKEN,
    LOOKUP_TOOL,
    SHARED_SECRET,
    Listings,
    listings_fake,
    manager,
    member_of,
    server_make,
)

pytestmark = pytest.mark.django_db

URL = "/api/v1/tool-servers/"
USER_FIELDS = {"id", "name", "auth", "credential_set", "tools", "status"}
STAFF_FIELDS = {
    "url",
    "groups",
    "allowed_tools",
    "timeout_seconds",
    "enabled",
    "secret_set",
    "created_at",
    "updated_at",
}
SECRETS = (SHARED_SECRET, ALICE_TOKEN, BOB_TOKEN, "n3w-Sh4red-Secret")


@pytest.fixture
def listings(monkeypatch) -> Listings:
    return listings_fake(monkeypatch)


@pytest.fixture
def servers(owner) -> dict[str, ToolServer]:
    """Open to everyone (each auth mode), to the research group (the owner is a member),
    and disabled."""
    member_of(owner, "research")
    return {
        "open": server_make("open"),
        "search": server_make("search", auth="shared", secret=SHARED_SECRET),
        "files": server_make("files", auth="per_user"),
        "research": server_make("research", auth="per_user", groups=["research", "ops"]),
        "off": server_make("off", auth="per_user", enabled=False),
    }


@pytest.fixture
def keeper(as_user) -> APIClient:
    """Staff with every tool server permission."""
    return as_user(manager())


def listed(client: APIClient, query: str = "") -> dict[str, dict[str, Any]]:
    response = client.get(URL + query)
    assert response.status_code == 200, response.content
    return {item["name"]: item for item in response.json()["results"]}


def put_token(client: APIClient, server: ToolServer, token: Any) -> Any:
    return client.put(f"{URL}{server.pk}/credential/", {"token": token}, format="json")


# --- reading ----------------------------------------------------------------------------


def test_each_user_lists_the_servers_open_to_them_with_their_tools(
    api, outsider_api, servers, listings
):
    mine = listed(api)
    assert list(mine) == ["files", "open", "research", "search"]
    assert mine["research"] == {
        "id": servers["research"].pk,
        "name": "research",
        "auth": "per_user",
        "credential_set": False,
        "tools": [
            {
                "name": LOOKUP_TOOL.name,
                "description": LOOKUP_TOOL.description,
                "parameters": LOOKUP_TOOL.parameters,
            }
        ],
        "status": "ok",
    }
    assert {item["auth"] for item in mine.values()} == {"none", "shared", "per_user"}
    assert list(listed(outsider_api)) == ["files", "open", "search"]
    # The tools are read as the asking user, for open servers only.
    assert ("research", "mallory") not in listings.calls
    assert ("off", "alice") not in listings.calls
    assert ("research", "alice") in listings.calls


def test_a_listing_says_why_a_servers_tools_could_not_be_read(api, servers, listings):
    listings.status["files"] = "credential_missing"
    assert listed(api)["files"]["status"] == "credential_missing"
    assert listed(api)["files"]["tools"] == []


def test_a_server_not_open_to_the_user_is_404_on_every_url(api, outsider_api, servers, listings):
    cases = [
        (outsider_api, servers["research"]),  # not in its groups
        (api, servers["off"]),  # disabled
    ]
    for client, server in cases:
        for method, path, body in [
            ("GET", f"{URL}{server.pk}/", None),
            ("PATCH", f"{URL}{server.pk}/", {"enabled": True}),
            ("DELETE", f"{URL}{server.pk}/", None),
            ("PUT", f"{URL}{server.pk}/credential/", {"token": ALICE_TOKEN}),
            ("DELETE", f"{URL}{server.pk}/credential/", None),
        ]:
            data = "" if body is None else json.dumps(body)
            response = client.generic(method, path, data, content_type="application/json")
            assert response.status_code == 404, (method, path, response.content)
            assert error_of(response)["code"] == "not_found"
    for malformed in ("abc", "0", "-1", "99999999"):
        assert api.get(f"{URL}{malformed}/").status_code == 404
    assert not ToolCredential.objects.exists()
    assert ToolServer.objects.get(name="off").enabled is False


def test_one_server_is_read_like_the_list(api, servers, listings):
    response = api.get(f"{URL}{servers['research'].pk}/")
    assert response.status_code == 200
    assert response.json() == listed(api)["research"]


# --- a user's own token ---------------------------------------------------------------------


def test_a_user_sets_and_clears_their_own_token_and_reads_only_that_it_is_set(
    api, outsider_api, servers, listings
):
    files = servers["files"]
    response = put_token(api, files, ALICE_TOKEN)
    assert (response.status_code, response.json()) == (200, {"credential_set": True})
    assert put_token(outsider_api, files, BOB_TOKEN).json() == {"credential_set": True}
    assert put_token(api, files, "replaced-T0ken").json() == {"credential_set": True}
    assert listed(api)["files"]["credential_set"] is True
    assert listed(api)["research"]["credential_set"] is False
    assert selectors.tool_credential_token(server=files, user=User.objects.get(username="alice"))
    deleted = api.delete(f"{URL}{files.pk}/credential/")
    assert (deleted.status_code, deleted.json()) == (200, {"credential_set": False})
    assert api.delete(f"{URL}{files.pk}/credential/").json() == {"credential_set": False}
    assert listed(api)["files"]["credential_set"] is False
    # The other user's token is theirs alone, untouched.
    assert listed(outsider_api)["files"]["credential_set"] is True
    mallory = User.objects.get(username="mallory")
    assert selectors.tool_credential_token(server=files, user=mallory) == BOB_TOKEN


@pytest.mark.parametrize(
    ("server", "body", "path"),
    [
        ("search", {"token": ALICE_TOKEN}, "$"),  # shared: no token of the user's
        ("open", {"token": ALICE_TOKEN}, "$"),
        ("files", {"token": ""}, "$.token"),
        ("files", {"token": f"{ALICE_TOKEN} x"}, "$.token"),
        ("files", {"token": 12345}, "$.token"),
        ("files", {"token": None}, "$.token"),
        ("files", {}, "$.token"),
        ("files", {"token": ALICE_TOKEN, "scope": "all"}, "$.scope"),
    ],
)
def test_a_bad_token_is_refused_naming_the_problem_without_the_token(
    api, servers, listings, server, body, path
):
    response = api.put(f"{URL}{servers[server].pk}/credential/", body, format="json")
    assert response.status_code == 400, response.content
    error = error_of(response)
    assert path in [problem["path"] for problem in error["details"]["problems"]]
    assert ALICE_TOKEN not in response.content.decode()
    assert not ToolCredential.objects.exists()


# --- staff --------------------------------------------------------------------------------


NEW_SERVER = {
    "name": "wiki",
    "url": "http://wiki.internal:8080/mcp",
    "auth": "shared",
    "secret": "n3w-Sh4red-Secret",
    "groups": ["research"],
    "allowed_tools": ["lookup"],
    "timeout_seconds": 45,
    "enabled": True,
}


def test_staff_with_the_permissions_register_change_and_remove_servers(keeper, servers, listings):
    created = keeper.post(URL, NEW_SERVER, format="json")
    assert created.status_code == 201, created.content
    body = created.json()
    assert set(body) == {"id", "name", "auth", "credential_set"} | STAFF_FIELDS
    assert body["secret_set"] is True
    assert (body["groups"], body["allowed_tools"], body["timeout_seconds"]) == (
        ["research"],
        ["lookup"],
        45,
    )
    server_id = body["id"]
    changed = keeper.patch(
        f"{URL}{server_id}/",
        {"enabled": False, "groups": [], "secret": None, "auth": "none"},
        format="json",
    )
    assert changed.status_code == 200, changed.content
    assert (changed.json()["enabled"], changed.json()["secret_set"]) == (False, False)
    # Disabled, it is still theirs to read and change.
    assert keeper.get(f"{URL}{server_id}/").json()["status"] == "not_open"
    assert keeper.delete(f"{URL}{server_id}/").status_code == 204
    assert not ToolServer.objects.filter(pk=server_id).exists()
    actions = list(
        AuditEvent.objects.filter(reason__contains="'wiki'")
        .order_by("at", "pk")
        .values_list("action", "actor_username")
    )
    assert actions == [
        ("server_added", "toolkeeper"),
        ("server_changed", "toolkeeper"),
        ("server_deleted", "toolkeeper"),
    ]


def test_staff_read_settings_and_every_server_with_all(keeper, api, servers, listings):
    mine = listed(keeper)
    assert set(mine["search"]) == USER_FIELDS | STAFF_FIELDS
    assert mine["search"]["secret_set"] is True
    assert "off" not in mine
    assert "research" not in mine  # the keeper is in neither of its groups
    every = listed(keeper, "?all=true")
    assert every["research"]["groups"] == ["ops", "research"]
    assert every["off"]["status"] == "not_open"
    assert every["research"]["status"] == "not_open"
    assert ("off", "toolkeeper") not in listings.calls
    # Users read no settings, and may not ask for every server.
    assert set(listed(api)["search"]) == USER_FIELDS
    refused = api.get(URL + "?all=true")
    assert (refused.status_code, error_of(refused)["code"]) == (403, "permission_denied")


@pytest.mark.parametrize("who", ["user", "plain staff", "staff without the permission"])
def test_others_may_not_register_change_or_remove_servers(as_user, owner, servers, who):
    client = as_user(
        {
            "user": owner,
            "plain staff": manager("plain", "view_conversation"),
            "staff without the permission": manager("viewer", "view_toolserver"),
        }[who]
    )
    before = list(ToolServer.objects.order_by("pk").values())
    audited = AuditEvent.objects.count()
    server = servers["open"]
    for response in [
        client.post(URL, NEW_SERVER, format="json"),
        client.patch(f"{URL}{server.pk}/", {"enabled": False}, format="json"),
        client.delete(f"{URL}{server.pk}/"),
    ]:
        assert response.status_code == 403, response.content
        assert error_of(response)["code"] == "permission_denied"
    assert list(ToolServer.objects.order_by("pk").values()) == before
    assert AuditEvent.objects.count() == audited


def test_one_permission_allows_only_its_own_write(as_user, servers):
    client = as_user(manager("changer", "change_toolserver"))
    server = servers["open"]
    changed = client.patch(f"{URL}{server.pk}/", {"timeout_seconds": 5}, format="json")
    assert changed.status_code == 200
    assert client.delete(f"{URL}{server.pk}/").status_code == 403
    assert client.post(URL, NEW_SERVER, format="json").status_code == 403


@pytest.mark.parametrize(
    ("body", "path"),
    [
        ({**NEW_SERVER, "name": "Wiki Pages"}, "$.name"),
        ({**NEW_SERVER, "name": "search"}, "$.name"),
        ({**NEW_SERVER, "url": "gopher://wiki"}, "$.url"),
        ({**NEW_SERVER, "auth": "magic"}, "$.auth"),
        ({**NEW_SERVER, "secret": None}, "$.secret"),
        ({**NEW_SERVER, "secret": "n3w-Sh4red-Secret\n"}, "$.secret"),
        ({**NEW_SERVER, "groups": ["nobody-has-this"]}, "$.groups[0]"),
        ({**NEW_SERVER, "allowed_tools": [7]}, "$.allowed_tools.0"),
        ({**NEW_SERVER, "timeout_seconds": 0}, "$.timeout_seconds"),
        ({**NEW_SERVER, "timeout_seconds": "45"}, "$.timeout_seconds"),
        ({**NEW_SERVER, "enabled": "yes"}, "$.enabled"),
        ({**NEW_SERVER, "token": "x"}, "$.token"),
        ({key: value for key, value in NEW_SERVER.items() if key != "url"}, "$.url"),
    ],
)
def test_a_bad_registration_is_refused_naming_the_problem(keeper, servers, body, path):
    count = ToolServer.objects.count()
    response = keeper.post(URL, body, format="json")
    assert response.status_code == 400, response.content
    paths = [problem["path"] for problem in error_of(response)["details"]["problems"]]
    assert path in paths, paths
    assert "n3w-Sh4red-Secret" not in response.content.decode()
    assert ToolServer.objects.count() == count


# --- no secret anywhere ----------------------------------------------------------------------


def test_no_answer_and_no_log_line_holds_a_secret(
    as_user, owner, outsider, servers, listings, caplog
):
    caplog.set_level(logging.DEBUG)
    keeper, alice, mallory = as_user(manager()), as_user(owner), as_user(outsider)
    files, search = servers["files"], servers["search"]
    answers: list[Any] = []
    calls: list[Callable[[], Any]] = [
        lambda: put_token(alice, files, ALICE_TOKEN),
        lambda: put_token(mallory, files, BOB_TOKEN),
        lambda: put_token(alice, files, f"{ALICE_TOKEN} bad"),
        lambda: put_token(alice, search, ALICE_TOKEN),
        lambda: keeper.post(URL, NEW_SERVER, format="json"),
        lambda: keeper.post(URL, {**NEW_SERVER, "name": "w2", "auth": "none"}, format="json"),
        lambda: keeper.patch(f"{URL}{search.pk}/", {"secret": SHARED_SECRET}, format="json"),
        lambda: keeper.patch(f"{URL}{search.pk}/", {"secret": "has space"}, format="json"),
        lambda: keeper.get(URL + "?all=true"),
        lambda: keeper.get(f"{URL}{search.pk}/"),
        lambda: alice.get(URL),
        lambda: alice.get(f"{URL}{files.pk}/"),
        lambda: mallory.get(URL),
        lambda: alice.get("/api/schema/"),
    ]
    for call in calls:
        answers.append(call())
    assert [a.status_code for a in answers[:4]] == [200, 200, 400, 400]
    text = "\n".join(a.content.decode() for a in answers) + caplog.text
    for secret in SECRETS:
        assert secret not in text
    assert "gAAAA" not in text  # nor any of them encrypted
    trail = " ".join(AuditEvent.objects.values_list("reason", flat=True))
    assert all(secret not in trail for secret in SECRETS)
