"""Child processes for end-to-end tests and benchmarks: started in their own session with
the test database and Redis in their environment, logging to a temporary file."""

import contextlib
import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from django.db import connection

ROOT = Path(__file__).resolve().parents[2]


def database_url_for_tests(name: str = "") -> str:
    """The URL of the database the test run uses (pytest-django's test database), or of
    the database `name` (a SQLite file, or a database on the same PostgreSQL server)."""
    settings = connection.settings_dict
    name = name or str(settings["NAME"])
    if connection.vendor == "sqlite":
        return f"sqlite:///{name}"
    user = settings.get("USER") or ""
    password = f":{settings['PASSWORD']}" if settings.get("PASSWORD") else ""
    host = settings.get("HOST") or "127.0.0.1"
    port = settings.get("PORT") or 5432
    return f"postgres://{user}{password}@{host}:{port}/{name}"


@dataclass
class ChildProcess:
    process: subprocess.Popen[bytes]
    log_path: Path
    started: float = field(default_factory=time.monotonic)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def kill(self) -> None:
        """SIGKILL, no warning: whatever the process was doing dies mid-way."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)

    def stop(self) -> None:
        """SIGTERM to the whole group, then wait until none of it is left: a worker's pool
        children may outlive their parent by a moment, and a database connection they
        still hold would block the test database's teardown."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()
        deadline = time.monotonic() + 10
        while group_members(self.process.pid):
            if time.monotonic() > deadline:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.process.pid, signal.SIGKILL)
                return
            time.sleep(0.05)


def group_members(group: int) -> list[int]:
    """The live processes of a process group (a zombie holds nothing, and whether one is
    reaped soon depends on the machine's init)."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            # "pid (name) state ppid pgrp ...": the name may hold spaces and parentheses.
            state, _, pgrp = stat.read_text().rsplit(")", 1)[1].split()[:3]
        except (OSError, IndexError):
            continue  # gone meanwhile
        if int(pgrp) == group and state != "Z":
            members.append(int(stat.parent.name))
    return members


def process_spawn(
    *, name: str, command: list[str], redis_url: str, env: dict[str, str] | None = None
) -> tuple[subprocess.Popen[bytes], Path]:
    """Start `command` from the project root with the test settings, database and Redis."""
    handle, log_name = tempfile.mkstemp(prefix=f"parley-{name}-", suffix=".log")
    log_file = os.fdopen(handle, "wb")
    full_env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "config.settings.test",
        "DATABASE_URL": database_url_for_tests(),
        "REDIS_URL": redis_url,
        "PYTHONUNBUFFERED": "1",
        "PARLEY_TEST_DB_POOL": "true",  # a connection pool, as in production
        **(env or {}),
    }
    process = subprocess.Popen(
        command, cwd=ROOT, env=full_env, stdout=log_file, stderr=subprocess.STDOUT,
        start_new_session=True,
    )  # fmt: skip
    log_file.close()  # the child holds its own copy of the descriptor
    return process, Path(log_name)


def process_wait_ready(child: ChildProcess, what: str, ready: Callable[[], bool]) -> None:
    """Wait up to 30 s for `ready()`; stop the child and raise with its log otherwise."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if ready():
            return
        if child.process.poll() is not None:
            raise RuntimeError(f"{what} exited early:\n{child.log()}")
        time.sleep(0.1)
    child.stop()
    raise RuntimeError(f"{what} did not become ready:\n{child.log()}")
