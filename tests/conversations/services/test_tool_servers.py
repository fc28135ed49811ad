"""Tool servers registered, changed and removed (checked, audited without secrets), who
may use them, users' own tokens, and the secrets at rest: encrypted in every table and
dump, rotated to a new key so the old one can be dropped."""

import io
import json
import logging

import pytest
from cryptography.fernet import Fernet
from django.core.management import CommandError, call_command
from django.db import connection

from accounts.models import User
from accounts.secrets import SecretUnreadable, secret_encrypt
from conversations import selectors, services
from conversations.errors import NotFound, ValidationFailed
from conversations.models import AuditEvent, ToolCredential, ToolServer
from conversations.services import tool_servers as tool_server_services
from tests.support.tool_servers import (
    ALICE_TOKEN,
    BOB_TOKEN,
    SHARED_SECRET,
    member_of,
    server_make,
)

pytestmark = pytest.mark.django_db

SECRETS = (SHARED_SECRET, ALICE_TOKEN, BOB_TOKEN, "n3w-Sh4red-Secret")


@pytest.fixture
def bob(db) -> User:
    return User.objects.create_user(username="bob", password="pw-bob-123")


def problems_of(refusal: pytest.ExceptionInfo[ValidationFailed]) -> dict[str, str]:
    return {problem.path: problem.message for problem in refusal.value.problems}


# --- registering ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "path"),
    [
        ({"name": "Has Space"}, "$.name"),
        ({"name": "UPPER"}, "$.name"),
        ({"name": "two__parts"}, "$.name"),
        ({"name": "-dash"}, "$.name"),
        ({"name": "x" * 41}, "$.name"),
        ({"name": 7}, "$.name"),
        ({"url": "ftp://files.internal/mcp"}, "$.url"),
        ({"url": "http://"}, "$.url"),
        ({"url": "files.internal/mcp"}, "$.url"),
        ({"url": "http://user:pw@files.internal/mcp"}, "$.url"),
        ({"url": "http://files.internal/mcp#part"}, "$.url"),
        ({"url": "http://files.internal:99999/mcp"}, "$.url"),
        ({"auth": "magic"}, "$.auth"),
        ({"timeout_seconds": 0}, "$.timeout_seconds"),
        ({"timeout_seconds": 601}, "$.timeout_seconds"),
        ({"timeout_seconds": "30"}, "$.timeout_seconds"),
        ({"timeout_seconds": True}, "$.timeout_seconds"),
        ({"groups": ["nobody-has-this"]}, "$.groups[0]"),
        ({"groups": "staff"}, "$.groups"),
        ({"allowed_tools": "lookup"}, "$.allowed_tools"),
        ({"allowed_tools": [1]}, "$.allowed_tools[0]"),
        ({"allowed_tools": ["lookup", "lookup"]}, "$.allowed_tools[1]"),
        ({"allowed_tools": ["has space"]}, "$.allowed_tools[0]"),
        ({"enabled": "yes"}, "$.enabled"),
        ({"auth": "shared"}, "$.secret"),
        ({"secret": SHARED_SECRET}, "$.secret"),
        ({"auth": "per_user", "secret": SHARED_SECRET}, "$.secret"),
        ({"auth": "shared", "secret": "has a space"}, "$.secret"),
        ({"auth": "shared", "secret": "x" * 4097}, "$.secret"),
    ],
)
def test_a_bad_registration_is_refused_by_its_field_and_stores_nothing(fields, path):
    given = {"name": "files", "url": "http://files.internal:8080/mcp", **fields}
    with pytest.raises(ValidationFailed) as refused:
        services.tool_server_create(actor=None, **given)
    assert path in problems_of(refused), problems_of(refused)
    assert SHARED_SECRET not in str(refused.value.details)
    assert (ToolServer.objects.count(), AuditEvent.objects.count()) == (0, 0)


def test_a_name_is_taken_once():
    server_make("files")
    with pytest.raises(ValidationFailed) as refused:
        server_make("files")
    assert problems_of(refused) == {"$.name": "is taken by another tool server"}


def test_internal_addresses_are_accepted():
    """Admins are trusted: loopback, private and single-label hosts all register."""
    for index, url in enumerate(
        [
            "http://127.0.0.1:9000/mcp",
            "http://10.0.0.7/mcp",
            "http://mcp:8000/mcp",
            "https://[::1]/",
        ]
    ):
        services.tool_server_create(actor=None, name=f"s{index}", url=url)
    assert ToolServer.objects.count() == 4


def test_each_write_is_audited_by_name_and_fields_never_with_the_secret(owner):
    admin = User.objects.create_user(username="root", password="pw", is_staff=True)
    server = server_make("search", auth="shared", secret=SHARED_SECRET, groups=["research"])
    server = services.tool_server_update(
        actor=admin, server=server, secret="n3w-Sh4red-Secret", timeout_seconds=60
    )
    services.tool_server_update(actor=admin, server=server, name="search2", auth="none")
    services.tool_server_update(actor=admin, server=server, timeout_seconds=60)  # no change
    services.tool_server_delete(actor=admin, server=ToolServer.objects.get(name="search2"))
    events = list(AuditEvent.objects.order_by("at", "pk").values_list("action", "reason"))
    assert events == [
        ("server_added", "tool server 'search' added: auth shared; secret set; groups research"),
        ("server_changed", "tool server 'search' changed: timeout_seconds, secret replaced"),
        (
            "server_changed",
            "tool server 'search2' changed: name (was 'search'), auth, secret cleared",
        ),
        ("server_deleted", "tool server 'search2' deleted, with 0 user token(s)"),
    ]
    assert AuditEvent.objects.filter(actor=admin).count() == 3
    trail = json.dumps(list(AuditEvent.objects.values()), default=str)
    for secret in SECRETS:
        assert secret not in trail
    assert "gAAAA" not in trail  # nor an encrypted one


def test_a_shared_server_keeps_a_secret_and_others_hold_none():
    server = server_make("search", auth="shared", secret=SHARED_SECRET)
    for cleared in (None, ""):
        with pytest.raises(ValidationFailed) as refused:
            services.tool_server_update(actor=None, server=server, secret=cleared)
        assert "$.secret" in problems_of(refused)
    server.refresh_from_db()
    assert selectors.tool_server_secret(server=server) == SHARED_SECRET
    services.tool_server_update(actor=None, server=server, auth="per_user")
    server.refresh_from_db()
    assert (server.secret_encrypted, server.secret_set) == ("", False)
    with pytest.raises(ValidationFailed):  # back to shared needs a secret again
        services.tool_server_update(actor=None, server=server, auth="shared")


def test_users_tokens_go_when_a_server_stops_being_per_user(owner):
    server = server_make("files", auth="per_user")
    services.tool_credential_set(server=server, user=owner, token=ALICE_TOKEN)
    services.tool_server_update(actor=None, server=server, auth="none")
    assert not ToolCredential.objects.exists()
    assert AuditEvent.objects.filter(reason__endswith="1 user token(s) deleted").exists()


def test_deleting_a_server_deletes_every_token_for_it(owner, bob):
    server = server_make("files", auth="per_user")
    services.tool_credential_set(server=server, user=owner, token=ALICE_TOKEN)
    services.tool_credential_set(server=server, user=bob, token=BOB_TOKEN)
    services.tool_server_delete(actor=None, server=server)
    assert not ToolCredential.objects.exists()
    assert AuditEvent.objects.get(action="server_deleted").reason.endswith("2 user token(s)")


# --- who may use a server -----------------------------------------------------------------


def test_a_server_is_open_to_everyone_or_to_its_groups_members_when_enabled(owner, bob):
    server_make("everyone")
    server_make("research-only", groups=["research"])
    server_make("two-groups", groups=["research", "ops"])
    server_make("off", enabled=False)
    member_of(owner, "research", "ops")
    staff = User.objects.create_user(username="staffer", password="pw", is_staff=True)

    def names(user: User) -> list[str]:
        return [server.name for server in selectors.tool_servers_open(user=user)]

    assert names(owner) == ["everyone", "research-only", "two-groups"]
    assert names(bob) == ["everyone"]
    assert names(staff) == ["everyone"]  # staff are held to the same rule
    off = ToolServer.objects.get(name="off")
    research = ToolServer.objects.get(name="research-only")
    for user, server in [(bob, research), (owner, off)]:
        with pytest.raises(ToolServer.DoesNotExist):
            selectors.tool_server_get_open(user=user, server_id=server.pk)
    for malformed in ("abc", "-1", "1.0", "\u0661", "9" * 30):
        with pytest.raises(ToolServer.DoesNotExist):
            selectors.tool_server_get_open(user=owner, server_id=malformed)


def test_credential_flags_for_many_servers_take_one_query(owner, django_assert_num_queries):
    servers = [server_make(f"s{index}", auth="per_user") for index in range(5)]
    services.tool_credential_set(server=servers[1], user=owner, token=ALICE_TOKEN)
    services.tool_credential_set(server=servers[3], user=owner, token=ALICE_TOKEN)
    with django_assert_num_queries(1):
        flagged = selectors.tool_credentials_set(user=owner, servers=servers)
    assert flagged == {servers[1].pk, servers[3].pk}


# --- a user's own token -----------------------------------------------------------------


def test_each_user_sets_replaces_and_clears_only_their_own_token(owner, bob):
    server = server_make("files", auth="per_user")
    services.tool_credential_set(server=server, user=owner, token="first-T0ken")
    services.tool_credential_set(server=server, user=owner, token=ALICE_TOKEN)
    services.tool_credential_set(server=server, user=bob, token=BOB_TOKEN)
    assert ToolCredential.objects.count() == 2
    assert selectors.tool_credential_token(server=server, user=owner) == ALICE_TOKEN
    assert selectors.tool_credential_token(server=server, user=bob) == BOB_TOKEN
    services.tool_credential_clear(server=server, user=owner)
    services.tool_credential_clear(server=server, user=owner)  # none left: not an error
    assert selectors.tool_credential_token(server=server, user=owner) is None
    assert selectors.tool_credential_token(server=server, user=bob) == BOB_TOKEN


def test_setting_or_clearing_a_token_has_the_tool_list_read_afresh(
    owner, monkeypatch, django_capture_on_commit_callbacks
):
    forgotten: list[str] = []
    monkeypatch.setattr(
        tool_server_services, "server_tools_forget", lambda server: forgotten.append(server.name)
    )
    server = server_make("files", auth="per_user")
    with django_capture_on_commit_callbacks(execute=True):
        services.tool_credential_set(server=server, user=owner, token=ALICE_TOKEN)
        services.tool_credential_clear(server=server, user=owner)
        services.tool_credential_clear(server=server, user=owner)  # nothing to clear
    assert forgotten == ["files", "files"]


def test_a_token_is_only_for_a_per_user_server_the_user_may_use(owner, bob):
    shared = server_make("search", auth="shared", secret=SHARED_SECRET)
    with pytest.raises(ValidationFailed) as refused:
        services.tool_credential_set(server=shared, user=owner, token=ALICE_TOKEN)
    assert "takes no token of yours" in refused.value.message
    closed = server_make("research", auth="per_user", groups=["research"])
    with pytest.raises(NotFound):
        services.tool_credential_set(server=closed, user=bob, token=BOB_TOKEN)
    open_one = server_make("files", auth="per_user")
    for bad in ("", "has space", "tab\tin", "x" * 4097, "ünïcode"):
        with pytest.raises(ValidationFailed) as refused:
            services.tool_credential_set(server=open_one, user=owner, token=bad)
        assert "$.token" in problems_of(refused)
    assert not ToolCredential.objects.exists()


# --- secrets at rest ------------------------------------------------------------------------


def test_secrets_are_encrypted_in_every_row_and_every_dump(owner, bob, caplog):
    caplog.set_level(logging.DEBUG)
    shared = server_make("search", auth="shared", secret=SHARED_SECRET)
    files = server_make("files", auth="per_user")
    services.tool_credential_set(server=files, user=owner, token=ALICE_TOKEN)
    services.tool_credential_set(server=files, user=bob, token=BOB_TOKEN)
    tables = [ToolServer._meta.db_table, ToolCredential._meta.db_table]
    rows = []
    with connection.cursor() as cursor:
        for table in tables:
            cursor.execute(f"SELECT * FROM {connection.ops.quote_name(table)}")
            rows += [" ".join(map(str, row)) for row in cursor.fetchall()]
    dumped = io.StringIO()
    call_command(
        "dumpdata", "conversations.toolserver", "conversations.toolcredential", stdout=dumped
    )
    shared.refresh_from_db()
    for text in ("\n".join(rows), dumped.getvalue(), caplog.text):
        for secret in (SHARED_SECRET, ALICE_TOKEN, BOB_TOKEN):
            assert secret not in text
    # The dump did hold the rows, encrypted.
    assert shared.secret_encrypted in dumped.getvalue()
    assert len(json.loads(dumped.getvalue())) == 4


def test_rotation_keeps_every_secret_readable_and_the_old_key_can_then_go(owner, settings):
    old, new = Fernet.generate_key().decode(), Fernet.generate_key().decode()
    settings.PARLEY_SECRET_KEYS = [old]
    shared = server_make("search", auth="shared", secret=SHARED_SECRET)
    files = server_make("files", auth="per_user")
    services.tool_credential_set(server=files, user=owner, token=ALICE_TOKEN)
    settings.PARLEY_SECRET_KEYS = [new]
    with pytest.raises(SecretUnreadable):  # the new key alone opens nothing yet
        selectors.tool_server_secret(server=shared)
    settings.PARLEY_SECRET_KEYS = [new, old]
    out, err = io.StringIO(), io.StringIO()
    call_command("secrets_rotate", stdout=out, stderr=err)
    assert "Encrypted 2 secret(s) again" in out.getvalue()
    settings.PARLEY_SECRET_KEYS = [new]
    shared.refresh_from_db()
    assert selectors.tool_server_secret(server=shared) == SHARED_SECRET
    assert selectors.tool_credential_token(server=files, user=owner) == ALICE_TOKEN
    assert SHARED_SECRET not in out.getvalue() + err.getvalue()


def test_rotation_names_the_secrets_no_key_opens_and_rotates_the_rest(owner, settings):
    lost, kept = Fernet.generate_key().decode(), Fernet.generate_key().decode()
    settings.PARLEY_SECRET_KEYS = [kept]
    files = server_make("files", auth="per_user")
    services.tool_credential_set(server=files, user=owner, token=ALICE_TOKEN)
    search = server_make("search", auth="shared", secret=SHARED_SECRET)
    settings.PARLEY_SECRET_KEYS = [lost]
    ToolServer.objects.filter(pk=search.pk).update(secret_encrypted=secret_encrypt(SHARED_SECRET))
    settings.PARLEY_SECRET_KEYS = [kept]
    out, err = io.StringIO(), io.StringIO()
    with pytest.raises(CommandError, match="1 secret"):
        call_command("secrets_rotate", stdout=out, stderr=err)
    assert "No configured key opens the shared secret of tool server 'search'." in err.getvalue()
    assert "Encrypted 1 secret(s)" in out.getvalue()
    assert SHARED_SECRET not in out.getvalue() + err.getvalue()
    assert selectors.tool_credential_token(server=files, user=owner) == ALICE_TOKEN
