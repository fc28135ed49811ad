"""`make run` starts on a fresh clone in every configuration: SQLite or DATABASE_URL, the
embedded Valkey or REDIS_URL. Each runs the README's command itself in a copy of the
tracked files (no var/, no static files collected yet), waits until the web server,
the worker and beat are up, answers a page, then stops on Ctrl-C."""

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.support.processes import ROOT, ChildProcess, database_url_for_tests
from tests.support.waiting import wait_until
from tests.support.web_server import free_port

pytestmark = pytest.mark.django_db(transaction=True)

NOT_INHERITED = ("REDIS_URL", "DATABASE_URL", "OPENAI_API_KEY", "OPENAI_BASE_URL",
                 "DJANGO_SETTINGS_MODULE", "PARLEY_BEAT_SCHEDULE", "CI")  # fmt: skip


def fresh_clone(tmp_path: Path) -> Path:
    """The tracked files as a clone has them (modification times kept, so `make` finds
    the installed environment up to date), with the environment itself shared."""
    tree = tmp_path / "clone"
    tracked = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    for name in filter(None, tracked):
        source = ROOT / name.decode()
        if source.is_file():
            target = tree / name.decode()
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    (tree / ".venv").symlink_to(Path(sys.executable).resolve().parents[1])
    assert not (tree / "var").exists()
    return tree


def answers(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/accounts/login/", timeout=2) as r:
            return r.status == 200
    except (urllib.error.URLError, OSError):
        return False


@pytest.mark.parametrize(
    ("database", "redis"),
    [("sqlite", "embedded"), ("postgres", "embedded"), ("sqlite", "url"), ("postgres", "url")],
)
def test_make_run_starts_on_a_fresh_clone(tmp_path, redis_url, database, redis):
    from django.db import connection

    if database == "postgres" and connection.vendor != "postgresql":
        database = "sqlite"  # the suite itself runs on SQLite: no server to point at
    tree = fresh_clone(tmp_path)
    port = free_port()
    env = {name: value for name, value in os.environ.items() if name not in NOT_INHERITED}
    env |= {"PARLEY_EMBEDDED_REDIS_PORT": str(free_port()), "PYTHONUNBUFFERED": "1"}
    if database == "postgres":
        env["DATABASE_URL"] = database_url_for_tests()
    if redis == "url":
        env["REDIS_URL"] = redis_url.rsplit("/", 1)[0] + "/7"  # a database of its own
    log_path = tmp_path / "make-run.log"
    with log_path.open("wb") as log_file:
        process = subprocess.Popen(
            ["make", "run", f"PORT={port}", "HOST=127.0.0.1"],
            cwd=tree, env=env, stdout=log_file, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
    child = ChildProcess(process=process, log_path=log_path)

    def up() -> bool:
        assert process.poll() is None, f"make run exited:\n{child.log()[-6000:]}"
        log = child.log()
        return " ready." in log and "beat: Starting" in log and answers(port)

    try:
        wait_until(up, timeout=120, what="make run", interval=0.2,
                   details=lambda: child.log()[-6000:])  # fmt: skip
        log = child.log()
        assert f"Parley is running at http://127.0.0.1:{port}/" in log
        assert ("embedded Valkey listening" in log) == (redis == "embedded")
        assert (tree / "var").is_dir()
        if database == "sqlite":
            assert (tree / "var" / "parley.sqlite3").exists()
        os.killpg(process.pid, signal.SIGINT)
        deadline = time.monotonic() + 20
        while process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert process.poll() is not None, "make run did not stop on Ctrl-C"
        assert "sending SIGKILL" not in child.log()
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        child.kill()
