"""Project-level promises: deploy checks, the demo login, the admin being served, and
tests that share helpers only through tests/support."""

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.management import call_command

from accounts.models import User

ROOT = Path(__file__).resolve().parent.parent
PRODUCTION = {
    "DJANGO_SETTINGS_MODULE": "config.settings.production",
    "SECRET_KEY": "p" * 20 + "r0dUct10n-s3cr3t-k3y-with-enough-entropy-xyz",
    "ALLOWED_HOSTS": "parley.example.com",
    "PARLEY_SECRET_KEYS": "Vq8Y0kCqXo4kR2m7bq1Kp9wq0p6l3hX6YyJm5sQ2n1U=",
}


def test_production_settings_pass_the_deploy_checks():
    env = {**os.environ, **PRODUCTION}
    result = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


def production_setting(expression: str, **extra: str) -> str:
    env = {**os.environ, **PRODUCTION, **extra}
    code = f"import django; django.setup(); from django.conf import settings; print({expression})"
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, check=True
    )
    return result.stdout.strip()


def test_production_pages_use_wss_and_preload_hsts_only_when_asked():
    assert production_setting("settings.PARLEY_CSP_WEBSOCKET_SCHEMES") == "['wss']"
    assert production_setting("settings.SECURE_HSTS_PRELOAD") == "False"
    assert production_setting("settings.SECURE_HSTS_PRELOAD", SECURE_HSTS_PRELOAD="true") == "True"


@pytest.mark.parametrize("missing", ["SECRET_KEY", "PARLEY_SECRET_KEYS"])
def test_production_settings_refuse_to_start_without_their_keys(missing):
    env = {**os.environ, **PRODUCTION}
    env.pop(missing)
    result = subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode != 0
    assert f"{missing} must be set" in result.stderr


@pytest.mark.django_db
def test_demo_user_command_creates_an_admin_login_and_is_repeatable(client):
    call_command("ensure_demo_user")
    call_command("ensure_demo_user")
    assert User.objects.filter(username="demo").count() == 1
    assert client.login(username="demo", password="demo")
    response = client.get("/admin/")
    assert response.status_code == 200
    assert b"Site administration" in response.content


@pytest.mark.django_db
def test_the_admin_asks_anonymous_visitors_to_log_in(client):
    response = client.get("/admin/")
    assert response.status_code == 302
    assert "/admin/login/" in response["Location"]


@pytest.mark.django_db
def test_the_admin_lists_conversations_without_their_text(client, conversation):
    from conversations import services

    services.user_message_append(conversation=conversation, content="a very private thought")
    User.objects.create_superuser(username="root", password="pw-root-123")
    client.login(username="root", password="pw-root-123")

    listing = client.get("/admin/conversations/conversation/")
    detail = client.get(f"/admin/conversations/conversation/{conversation.pk}/change/")

    assert listing.status_code == 200
    assert b"Cats" in listing.content
    assert detail.status_code == 200
    assert b"a very private thought" not in detail.content


@pytest.mark.django_db
def test_audit_events_cannot_be_edited_even_by_a_superuser(client, conversation):
    from conversations import services
    from conversations.models import AuditEvent

    event = services.audit_record(actor=None, action="viewed", conversation=conversation)
    User.objects.create_superuser(username="root", password="pw-root-123")
    client.login(username="root", password="pw-root-123")

    assert client.get("/admin/conversations/auditevent/").status_code == 200
    delete_url = f"/admin/conversations/auditevent/{event.pk}/delete/"
    assert client.post(delete_url, {"post": "yes"}).status_code == 403
    assert AuditEvent.objects.filter(pk=event.pk).exists()


def imported_modules(path: Path) -> set[str]:
    """Every module a file imports, inside functions too, relative imports resolved; for
    `from a import b`, both `a` and `a.b` (b may be a module)."""
    package = path.relative_to(ROOT).with_suffix("").parts[:-1]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else ()
            module = ".".join([*base, *(node.module or "").split(".")]).strip(".")
            found.add(module)
            found.update(f"{module}.{alias.name}" for alias in node.names)
    return found


def test_no_module_imports_a_test_module_or_a_conftest():
    """Helpers that several test modules (or the benchmarks) share live in tests/support,
    fixtures in conftest.py files; importing a test module or a conftest instead runs its
    tests or fixtures twice and ties unrelated modules together."""
    offending = {
        f"{path.relative_to(ROOT)} imports {module}"
        for folder in ("tests", "bench")
        for path in (ROOT / folder).rglob("*.py")
        for module in imported_modules(path)
        if module.startswith("tests.")
        and module.rsplit(".", 1)[-1].startswith(("test_", "conftest"))
    }
    assert sorted(offending) == []


def test_each_parallel_test_process_has_a_redis_database_of_its_own(monkeypatch):
    from tests.support.redis_server import redis_database_per_test_process as database_for

    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    assert database_for("redis://127.0.0.1:6379/0") == "redis://127.0.0.1:6379/0"
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw0")
    assert database_for("redis://127.0.0.1:6379/0") == "redis://127.0.0.1:6379/1"
    assert database_for("redis://127.0.0.1:6379") == "redis://127.0.0.1:6379/1"
    assert database_for("") == ""  # an embedded server of its own instead
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw1")
    assert database_for("redis://:secret@redis:6379/3") == "redis://:secret@redis:6379/5"


def test_every_collected_test_has_a_node_id_of_its_own():
    # Schemathesis names one test per API operation; each must be told apart by its id.
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
         "tests/conversations/api/test_schema.py"],
        cwd=ROOT, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    ids = [line for line in result.stdout.splitlines() if "::test_the_api_keeps" in line]
    assert len(ids) > 10
    assert len(set(ids)) == len(ids)
    assert any(line.endswith("[POST /api/v1/chat/]") for line in ids)
