"""Tool servers in the admin: registered and changed through the services (checked the
same way, audited), the secret write-only (never rendered, blank keeps it, a checkbox
clears it), users' tokens not in the admin at all, and no secret on any page."""

from typing import Any

import pytest
from django.contrib.auth.models import Group
from django.urls import NoReverseMatch, reverse

from accounts.models import User
from conversations import selectors, services
from conversations.models import AuditEvent, ToolCredential, ToolServer
from tests.support.admin import client_for, staff
from tests.support.tool_servers import ALICE_TOKEN, SHARED_SECRET, manager, server_make

pytestmark = pytest.mark.django_db

NEW_SECRET = "n3w-Sh4red-Secret"
LIST = "admin:conversations_toolserver_changelist"
ADD = "admin:conversations_toolserver_add"


def change_url(server: ToolServer) -> str:
    return reverse("admin:conversations_toolserver_change", args=[server.pk])


def form_data(**fields: Any) -> dict[str, Any]:
    data = {
        "name": "wiki",
        "url": "http://wiki:8080/mcp",
        "auth": "shared",
        "secret": SHARED_SECRET,
        "groups": [],
        "allowed_tools": "lookup\n  search  \n\n",
        "timeout_seconds": "45",
        "enabled": "on",
        **fields,
    }
    return {key: value for key, value in data.items() if value is not None}


@pytest.fixture
def keeper(db) -> Any:
    return client_for(manager())


def page(client: Any, url: str) -> str:
    response = client.get(url)
    assert response.status_code == 200, response.status_code
    return str(response.content.decode())


def assert_no_secret(text: str, server: ToolServer | None = None) -> None:
    for secret in (SHARED_SECRET, NEW_SECRET, ALICE_TOKEN):
        assert secret not in text
    if server is not None and server.secret_encrypted:
        assert server.secret_encrypted not in text


def test_registering_in_the_admin_goes_through_the_services(keeper):
    research = Group.objects.create(name="research")
    assert 'name="secret" autocomplete="new-password"' in page(keeper, reverse(ADD))
    response = keeper.post(reverse(ADD), form_data(groups=[research.pk]))
    assert response.status_code == 302, response.content.decode()[:2000]
    server = ToolServer.objects.get(name="wiki")
    assert (server.url, server.auth, server.timeout_seconds) == (
        "http://wiki:8080/mcp",
        "shared",
        45,
    )
    assert server.allowed_tools == ["lookup", "search"]
    assert list(server.groups.values_list("name", flat=True)) == ["research"]
    assert selectors.tool_server_secret(server=server) == SHARED_SECRET
    assert SHARED_SECRET not in server.secret_encrypted
    event = AuditEvent.objects.get(action="server_added")
    assert (event.actor_username, event.reason) == (
        "toolkeeper",
        "tool server 'wiki' added: auth shared; secret set; groups research",
    )


def test_the_change_form_never_renders_the_secret_and_blank_keeps_it(keeper):
    server = server_make("wiki", auth="shared", secret=SHARED_SECRET, allowed_tools=["a", "b"])
    text = page(keeper, change_url(server))
    assert_no_secret(text, server)
    assert 'type="password"' in text
    assert "a\nb</textarea>" in text
    # Saved with the secret left blank: kept.
    response = keeper.post(change_url(server), form_data(secret="", timeout_seconds="50"))
    assert response.status_code == 302
    server.refresh_from_db()
    assert server.timeout_seconds == 50
    assert selectors.tool_server_secret(server=server) == SHARED_SECRET
    # A new one replaces it.
    keeper.post(change_url(server), form_data(secret=NEW_SECRET))
    server.refresh_from_db()
    assert selectors.tool_server_secret(server=server) == NEW_SECRET
    reasons = list(AuditEvent.objects.order_by("at", "pk").values_list("reason", flat=True))
    assert reasons[-2:] == [
        "tool server 'wiki' changed: url, allowed_tools, timeout_seconds",
        "tool server 'wiki' changed: timeout_seconds, secret replaced",
    ]
    assert_no_secret(page(keeper, change_url(server)), server)


def test_the_secret_is_cleared_by_its_checkbox_and_a_shared_server_keeps_one(keeper):
    server = server_make("wiki", auth="shared", secret=SHARED_SECRET)
    refused = keeper.post(change_url(server), form_data(secret="", clear_secret="on"))
    assert refused.status_code == 200
    assert "a &#x27;shared&#x27; server sends one secret" in refused.content.decode()
    both = keeper.post(change_url(server), form_data(secret=NEW_SECRET, clear_secret="on"))
    assert "Enter a new secret or clear it, not both." in both.content.decode()
    server.refresh_from_db()
    assert selectors.tool_server_secret(server=server) == SHARED_SECRET
    done = keeper.post(change_url(server), form_data(auth="none", secret="", clear_secret="on"))
    assert done.status_code == 302
    server.refresh_from_db()
    assert (server.auth, server.secret_set) == ("none", False)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"name": "Wiki Pages"}, "Enter a valid"),
        ({"name": "two__parts"}, "joined by single hyphens or underscores"),
        ({"url": "ftp://wiki/mcp"}, "must be an http:// or https:// URL"),
        ({"url": "http://me:pw@wiki/mcp"}, "must not carry a user or password"),
        ({"auth": "none"}, "is only for a server whose auth is"),
        ({"timeout_seconds": "0"}, "must be from 1 to 600"),
        ({"allowed_tools": "has space"}, "letters, digits, underscores"),
    ],
)
def test_a_bad_form_is_shown_again_with_the_problem_and_nothing_stored(keeper, fields, message):
    response = keeper.post(reverse(ADD), form_data(**fields))
    assert response.status_code == 200
    text = response.content.decode()
    assert message in text.replace("&#x27;", "'"), text[:3000]
    assert_no_secret(text)
    assert not ToolServer.objects.exists()
    assert not AuditEvent.objects.exists()


def test_the_list_shows_whether_a_secret_is_set_and_how_many_tokens_never_their_values(
    keeper, owner
):
    server = server_make("files", auth="per_user")
    services.tool_credential_set(server=server, user=owner, token=ALICE_TOKEN)
    shared = server_make("search", auth="shared", secret=SHARED_SECRET)
    text = page(keeper, reverse(LIST))
    for shown in ("files", "search", "icon-yes.svg", "icon-no.svg"):
        assert shown in text
    assert_no_secret(text, shared)
    token = ToolCredential.objects.get().token_encrypted
    for url in [change_url(server), change_url(shared), reverse(LIST) + "?o=6"]:
        body = page(keeper, url)
        assert_no_secret(body, shared)
        assert token not in body
    history = reverse("admin:conversations_toolserver_history", args=[shared.pk])
    assert_no_secret(page(keeper, history), shared)


def test_users_tokens_are_not_in_the_admin_and_secrets_are_never_a_filter(keeper, owner):
    with pytest.raises(NoReverseMatch):
        reverse("admin:conversations_toolcredential_changelist")
    server_make("search", auth="shared", secret=SHARED_SECRET)
    for lookup in ("secret_encrypted__startswith=g", "credentials__token_encrypted__gt=a"):
        assert keeper.get(f"{reverse(LIST)}?{lookup}").status_code == 400, lookup
    users = reverse("admin:accounts_user_changelist")
    superuser = client_for(User.objects.create_superuser(username="root", password="pw"))
    assert superuser.get(f"{users}?tool_credentials__token_encrypted__gt=a").status_code == 400


def test_deleting_in_the_admin_is_audited_and_takes_the_tokens(keeper, owner):
    server = server_make("files", auth="per_user")
    services.tool_credential_set(server=server, user=owner, token=ALICE_TOKEN)
    delete = reverse("admin:conversations_toolserver_delete", args=[server.pk])
    assert keeper.post(delete, {"post": "yes"}).status_code == 302
    assert not ToolServer.objects.exists()
    assert not ToolCredential.objects.exists()
    event = AuditEvent.objects.get(action="server_deleted")
    assert (event.actor_username, event.reason) == (
        "toolkeeper",
        "tool server 'files' deleted, with 1 user token(s)",
    )


def test_only_staff_with_the_permissions_reach_the_pages(owner):
    server = server_make("files")
    plain = client_for(staff("plain", "view_conversation"))
    assert plain.get(reverse(LIST)).status_code == 403
    assert plain.post(reverse(ADD), form_data(auth="none", secret="")).status_code == 403
    viewer = client_for(staff("viewer", "view_toolserver"))
    assert viewer.get(reverse(LIST)).status_code == 200
    shared = server_make("search", auth="shared", secret=SHARED_SECRET)
    assert_no_secret(page(viewer, change_url(shared)), shared)  # read-only, still no secret
    assert viewer.post(change_url(server), form_data(auth="none", secret="")).status_code == 403
    outsider = client_for(owner)
    assert outsider.get(reverse(LIST)).status_code == 302
    assert ToolServer.objects.get(name="files").url == "http://files.internal:8080/mcp"
