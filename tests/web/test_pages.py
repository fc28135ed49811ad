"""The server-rendered pages, without a browser: who may see what, sign-up switch, API keys."""

import json
import re

import pytest
from django.test import Client

from accounts.models import ApiKey, User
from accounts.services import api_key_create
from conversations import services

pytestmark = pytest.mark.django_db


@pytest.fixture
def alice(client: Client, owner: User) -> Client:
    client.force_login(owner)
    return client


def test_home_leads_visitors_to_log_in_and_members_to_the_chat(client: Client, owner):
    assert client.get("/")["Location"] == "/accounts/login/"
    client.force_login(owner)
    assert client.get("/")["Location"] == "/chat/"
    assert client.get("/chat/").status_code == 200


def test_the_chat_needs_a_login(client: Client, conversation):
    response = client.get(f"/chat/{conversation.pk}/")
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/")


def test_a_conversation_page_is_for_its_owner_only(alice: Client, conversation, outsider):
    assert alice.get(f"/chat/{conversation.pk}/").status_code == 200
    theirs = services.conversation_create(owner=outsider, title="Theirs")
    response = alice.get(f"/chat/{theirs.pk}/")
    assert response.status_code == 404
    assert b"Theirs" not in response.content
    assert alice.get("/chat/00000000-0000-0000-0000-000000000000/").status_code == 404


def test_the_composer_offers_files_within_the_servers_limits(alice: Client, settings):
    settings.PARLEY_FILE_MAX_PER_MESSAGE = 3
    settings.PARLEY_FILE_MAX_BYTES = 5 * 1024 * 1024
    page = alice.get("/chat/").content.decode()
    assert 'aria-label="Attach files"' in page
    assert "up to 3 with a message, 5.0\xa0MB each" in page
    # The page's modules refuse what the server would, before a byte is sent.
    found = re.search(r'<script id="parley-config" type="application/json">(.*?)</script>', page)
    assert found is not None
    config = json.loads(found.group(1))
    assert (config["maxFilesPerMessage"], config["maxFileBytes"]) == (3, 5 * 1024 * 1024)


def test_chat_pages_forbid_inline_script(alice: Client):
    policy = alice.get("/chat/")["Content-Security-Policy"]
    assert "script-src 'self'" in policy
    assert "unsafe-inline" not in policy
    # Images and media only from Parley: a reply cannot make the browser call elsewhere.
    # Not even data: (the page's icon is a file of the site's own); blob: is the local
    # preview of a file being attached, which no server sees.
    assert "img-src 'self' blob:;" in policy
    assert b'<link rel="icon" href="/static/web/favicon.svg"' in alice.get("/chat/").content
    assert "media-src 'self'" in policy
    assert "connect-src 'self' ws://testserver wss://testserver" in policy


def test_every_page_has_a_policy_that_forbids_foreign_and_inline_script(
    alice: Client, client: Client, settings
):
    settings.DEBUG = False
    superuser = User.objects.create_superuser(username="root", password="pw-root-123")
    admin = Client()
    admin.force_login(superuser)
    pages = {
        "login": client.get("/accounts/login/"),
        "admin login": client.get("/admin/login/"),
        "admin index": admin.get("/admin/"),
        "admin list": admin.get("/admin/conversations/conversation/"),
        "api docs": client.get("/api/docs/"),
        "api redoc": client.get("/api/redoc/"),
        "not found": alice.get("/no/such/page/"),
        "api error": client.get("/api/v1/conversations/"),
    }
    for name, response in pages.items():
        policy = response["Content-Security-Policy"]
        assert "script-src 'self';" in policy, name
        assert "frame-ancestors 'none'" in policy, name
        assert "object-src 'none'" in policy, name


def test_pages_outside_the_admin_and_the_docs_get_the_web_uis_strict_policy(
    alice: Client, client: Client, settings
):
    settings.DEBUG = False
    for response in (
        alice.get("/no/such/page/"),
        client.get("/"),
        client.get("/accounts/signup/"),
        client.post("/accounts/login/", {"username": "x", "password": "y"}),
    ):
        policy = response["Content-Security-Policy"]
        assert "style-src 'self';" in policy
        assert "img-src 'self' blob:;" in policy
        assert "base-uri 'none'" in policy
        assert response["X-DNS-Prefetch-Control"] == "off"


def test_production_pages_connect_to_websockets_over_tls_only(alice: Client, settings):
    settings.PARLEY_CSP_WEBSOCKET_SCHEMES = ["wss"]  # as config.settings.production sets
    policy = alice.get("/chat/")["Content-Security-Policy"]
    assert "wss://testserver" in policy
    assert "ws://" not in policy


def test_demo_mode_is_announced_only_with_the_demo_model(alice: Client, settings):
    settings.OPENAI_API_KEY = ""
    assert b"Demo mode" in alice.get("/chat/").content
    settings.OPENAI_API_KEY = "sk-real"
    assert b"Demo mode" not in alice.get("/chat/").content


def test_sign_up_creates_an_account_and_logs_in(client: Client):
    password = "a-long-passphrase-42"
    response = client.post(
        "/accounts/signup/", {"username": "bea", "password1": password, "password2": password}
    )
    assert response["Location"] == "/"
    assert User.objects.filter(username="bea").exists()
    assert client.get("/chat/").status_code == 200


def test_a_bad_sign_up_explains_and_stores_nothing(client: Client):
    response = client.post(
        "/accounts/signup/", {"username": "bea", "password1": "x", "password2": "y"}
    )
    assert response.status_code == 200
    assert b"didn" in response.content  # "The two password fields didn't match."
    assert not User.objects.filter(username="bea").exists()


def test_sign_up_can_be_switched_off(client: Client, settings):
    settings.PARLEY_SIGNUP_ENABLED = False
    assert client.get("/accounts/signup/").status_code == 404
    assert client.post("/accounts/signup/", {"username": "x"}).status_code == 404
    assert b"Create an account" not in client.get("/accounts/login/").content


def test_logout_is_a_post(alice: Client):
    assert alice.get("/accounts/logout/").status_code == 405
    assert alice.post("/accounts/logout/")["Location"] == "/accounts/login/"
    assert alice.get("/chat/").status_code == 302


def test_forms_refuse_a_missing_csrf_token(owner):
    client = Client(enforce_csrf_checks=True)
    response = client.post("/accounts/login/", {"username": "alice", "password": "pw-alice-123"})
    assert response.status_code == 403


def test_password_change(alice: Client, owner):
    response = alice.post(
        "/accounts/password/",
        {
            "old_password": "pw-alice-123",
            "new_password1": "another-long-phrase-7",
            "new_password2": "another-long-phrase-7",
        },
    )
    assert response["Location"] == "/accounts/password/done/"
    owner.refresh_from_db()
    assert owner.check_password("another-long-phrase-7")


def test_api_keys_page_shows_a_new_secret_once(alice: Client, owner):
    response = alice.post("/accounts/api-keys/", {"name": "laptop script", "scopes": ["chat"]})
    key = ApiKey.objects.get(owner=owner)
    secret = response.context["secret"]
    assert secret.startswith(f"prl_{key.prefix}_")
    assert secret.encode() in response.content
    assert "no-store" in response["Cache-Control"]
    listing = alice.get("/accounts/api-keys/")
    assert b"laptop script" in listing.content
    assert secret.encode() not in listing.content


def test_the_api_keys_page_offers_scopes_checked_as_the_default_and_lists_them(
    alice: Client, owner
):
    page = alice.get("/accounts/api-keys/").content.decode()
    for scope in ("chat", "read", "keys"):
        assert f'type="checkbox" name="scopes" value="{scope}"' in page
    checked = re.findall(r'<input type="checkbox" name="scopes" value="(\w+)"[^>]*checked', page)
    assert sorted(checked) == ["chat", "read"]
    alice.post("/accounts/api-keys/", {"name": "dashboard", "scopes": ["read"]})
    alice.post("/accounts/api-keys/", {"name": "admin bot", "scopes": ["read", "keys"]})
    assert {k.name: k.scopes for k in ApiKey.objects.filter(owner=owner)} == {
        "dashboard": ["read"],
        "admin bot": ["keys", "read"],
    }
    listing = alice.get("/accounts/api-keys/").content.decode()
    rows = [re.findall(r"<td>(.*?)</td>", row, re.S) for row in listing.split("<tr>")[2:]]
    # Name, key, scopes, ...
    assert {cells[0]: cells[2] for cells in rows} == {
        "dashboard": "read",
        "admin bot": "keys, read",
    }


def test_an_api_key_needs_a_scope(alice: Client, owner):
    response = alice.post("/accounts/api-keys/", {"name": "none"})
    assert response.status_code == 200
    assert b"Choose at least one scope." in response.content
    assert not ApiKey.objects.filter(owner=owner).exists()


def test_an_api_key_needs_a_name(alice: Client, owner):
    response = alice.post("/accounts/api-keys/", {"name": ""})
    assert response.status_code == 200
    assert not ApiKey.objects.filter(owner=owner).exists()


def test_revoke_own_key_only(alice: Client, owner, outsider):
    mine, _ = api_key_create(owner=owner, name="mine")
    theirs, _ = api_key_create(owner=outsider, name="theirs")
    assert alice.post(f"/accounts/api-keys/{theirs.pk}/revoke/").status_code == 404
    theirs.refresh_from_db()
    assert theirs.revoked_at is None
    assert alice.post(f"/accounts/api-keys/{mine.pk}/revoke/").status_code == 302
    mine.refresh_from_db()
    assert mine.revoked_at is not None
    assert b"theirs" not in alice.get("/accounts/api-keys/").content


def test_project_pages_for_errors_are_styled_like_the_app(client: Client, settings, rf):
    settings.DEBUG = False
    not_found = client.get("/no/such/page/")
    assert not_found.status_code == 404
    assert b"/static/web/app.css" in not_found.content
    assert b"Not found" in not_found.content

    from django.utils.module_loading import import_string

    from config.urls import handler500

    failed = import_string(handler500)(rf.get("/chat/"))
    assert failed.status_code == 500
    assert b"Something went wrong" in failed.content
    assert b"/static/web/app.css" in failed.content

    strict = Client(enforce_csrf_checks=True)
    refused = strict.post("/accounts/login/", {"username": "alice", "password": "x"})
    assert refused.status_code == 403
    assert b"This page has expired" in refused.content
    assert b"/static/web/app.css" in refused.content
