"""Migrating a large database to branches: how long each step takes, and how long it
keeps writers waiting.

On a scratch PostgreSQL database (created beside the one in DATABASE_URL, dropped at the
end, also on error) it migrates to conversations 0014, the last schema without branches,
and loads with COPY, through the historical models of the migration state at 0014 (not
the current ones, which have the branch columns): 1,000,000 messages (9,000
conversations of 100 and one of 100,000, a tool call and its result in about half the
turns) and a completed run per user turn. The message search index is built once, after
the load, as it would have been built over time.

Then it runs `migrate conversations 0015`, `0016` and `0017` in turn, timing each, while a
writer in another process inserts a new conversation and its first message every ~50 ms
(raw SQL, as the previous release does up to 0016; during 0017 as the new release does,
with a root branch). For each step the table gives the writer's longest insert (how long
writers were blocked) and the step's slowest statements (where its time and its locks
go). The writer's own baseline is measured first, with nothing migrating.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres \\
        .venv/bin/python -m bench.migrate_branches
"""

import argparse
import contextlib
import json
import multiprocessing
import os
import signal
import statistics
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg import sql

SCRATCH = "parley_migrate_bench"
BEFORE = "0014_conversation_search_trigram"
STEPS = ("0015_branches", "0016_branches_fill", "0017_branches_required")
WRITE_EVERY = 0.05
CHUNK = 500  # conversations per COPY
VOCABULARY = (
    "the model returned a summary of quarterly revenue and asked whether the draft should "
    "mention churn pricing latency growth customers reported faster replies after caching"
)


def scratch_url(url: str, name: str) -> str:
    parts = urlsplit(url)
    if parts.scheme not in ("postgres", "postgresql"):
        raise SystemExit("bench.migrate_branches needs DATABASE_URL=postgres://... (a server)")
    return urlunsplit(parts._replace(path=f"/{name}"))


def server_execute(url: str, statement: str) -> None:
    """Run a statement on the server's maintenance database (CREATE/DROP DATABASE)."""
    with psycopg.connect(scratch_url(url, "postgres"), autocommit=True) as conn:
        conn.execute(statement)


# --- the writer, in its own process: psycopg only, no Django -----------------------------


@dataclass(frozen=True)
class Rows:
    """Column -> value of each table's insert (JSON as text); ids and times set per write."""

    conversation: dict[str, Any]
    message: dict[str, Any]
    branch: dict[str, Any] | None = None  # the new release writes a root branch too


def _insert(conn: psycopg.Connection[Any], table: str, row: dict[str, Any]) -> None:
    statement = sql.SQL("INSERT INTO {} ({}) VALUES ({})").format(
        sql.Identifier(table),
        sql.SQL(", ").join(map(sql.Identifier, row)),
        sql.SQL(", ").join(sql.Placeholder() * len(row)),
    )
    conn.execute(statement, list(row.values()))


def write_one(conn: psycopg.Connection[Any], rows: Rows) -> None:
    now = datetime.now(UTC)
    key = uuid.uuid4()
    times = {"created_at": now, "updated_at": now, "last_activity_at": now}
    conversation = rows.conversation | times | {"id": key, "message_count": 1}
    message = rows.message | {"id": uuid.uuid4(), "conversation_id": key, "created_at": now}
    branch = None
    if rows.branch is not None:
        branch = rows.branch | {"id": uuid.uuid4(), "conversation_id": key, "created_at": now}
        conversation["active_branch_id"] = message["branch_id"] = branch["id"]
    with conn.transaction():
        _insert(conn, "conversations_conversation", conversation)
        if branch is not None:
            _insert(conn, "conversations_branch", branch)
        _insert(conn, "conversations_message", message)


def writer_main(url: str, plans: list[Rows], mode: Any, stop: Any, out: Any) -> None:
    """Insert every WRITE_EVERY seconds until stopped; send back (start, end, error) of
    each insert, on the monotonic clock the parent shares."""
    samples: list[tuple[float, float, str]] = []
    with psycopg.connect(url, autocommit=True) as conn:
        while not stop.is_set():
            started, error = time.monotonic(), ""
            try:
                write_one(conn, plans[mode.value])
            except psycopg.Error as exc:
                error = f"{type(exc).__name__}: {str(exc).splitlines()[0]}"
            ended = time.monotonic()
            samples.append((started, ended, error))
            time.sleep(WRITE_EVERY)
    out.put(samples)


# --- in the parent, after Django is set up for the scratch database ----------------------


def historical_row(model: Any, **values: Any) -> dict[str, Any]:
    """Every concrete column of a historical model: its default, or the value given."""
    from django.db import models

    row: dict[str, Any] = {}
    for f in model._meta.concrete_fields:
        value = values[f.attname] if f.attname in values else f.get_default()
        if isinstance(f, models.JSONField) and value is not None:
            value = json.dumps(value)
        row[f.column] = value
    return row


def copy_rows(model: Any, rows: list[dict[str, Any]]) -> None:
    from django.db import connection

    columns = [f.column for f in model._meta.concrete_fields]
    statement = sql.SQL("COPY {} ({}) FROM STDIN").format(
        sql.Identifier(model._meta.db_table), sql.SQL(", ").join(map(sql.Identifier, columns))
    )
    connection.ensure_connection()
    raw: Any = connection.connection
    with raw.cursor() as cursor, cursor.copy(statement) as copy:
        for row in rows:
            copy.write_row([row[column] for column in columns])


def turns(texts: list[str], size: int, key: int) -> Iterator[tuple[str, dict[str, Any]]]:
    """`size` (role, fields) in turns: user, sometimes a tool call and its result, reply."""
    n = 0
    while n < size:
        text = texts[(key + n) % len(texts)]
        group: list[tuple[str, dict[str, Any]]] = [("user", {"content": text})]
        if (key + n) % 3 == 0:
            call = f"call_{key}_{n}"
            calls = [{"id": call, "name": "calculator", "arguments": '{"expression": "6*7"}'}]
            group.append(("assistant", {"tool_calls": calls}))
            group.append(("tool", {"tool_call_id": call, "name": "calculator", "content": "42"}))
        group.append(("assistant", {"content": text[::-1]}))
        yield from group[: size - n]
        n += len(group)


def load(apps: Any, owner_id: int, sizes: list[int]) -> None:
    """COPY the conversations, then each chunk's messages and runs."""
    from django.db import connection

    Conversation = apps.get_model("conversations", "Conversation")
    Message = apps.get_model("conversations", "Message")
    Run = apps.get_model("conversations", "Run")
    words = VOCABULARY.split()
    texts = [" ".join(words[(i * 7 + j) % len(words)] for j in range(30)) for i in range(997)]
    start = datetime.now(UTC) - timedelta(days=30)
    with connection.cursor() as cursor:
        cursor.execute("DROP INDEX IF EXISTS message_search_vector")
    keys = [uuid.uuid4() for _ in sizes]
    copy_rows(
        Conversation,
        [
            historical_row(Conversation, id=k, owner_id=owner_id, title=f"c{i}", message_count=n)
            for i, (k, n) in enumerate(zip(keys, sizes, strict=True))
        ],
    )
    for first in range(0, len(sizes), CHUNK):
        messages, runs = [], []
        for key, size in zip(
            keys[first : first + CHUNK], sizes[first : first + CHUNK], strict=True
        ):
            run_id = None
            for seq, (role, fields) in enumerate(turns(texts, size, seq_key(key)), start=1):
                when = start + timedelta(seconds=seq)
                values = {"id": uuid.uuid4(), "conversation_id": key, "seq": seq, "role": role}
                if role == "user":
                    run_id = uuid.uuid4()
                    runs.append(
                        historical_row(
                            Run,
                            id=run_id,
                            conversation_id=key,
                            trigger_message_id=values["id"],
                            status="completed",
                            iterations=1,
                            created_at=when,
                        )
                    )
                else:
                    values["run_id"] = run_id
                messages.append(historical_row(Message, created_at=when, **values, **fields))
        copy_rows(Message, messages)
        copy_rows(Run, runs)
        progress(f"  loaded {min(first + CHUNK, len(sizes)):,}/{len(sizes):,} conversations")
    progress("building the search index…")
    with connection.cursor() as cursor:
        cursor.execute(
            "CREATE INDEX message_search_vector ON conversations_message USING gin (search_vector)"
        )
        for table in ("conversation", "message", "run"):
            cursor.execute(f"VACUUM ANALYZE conversations_{table}")


def seq_key(key: uuid.UUID) -> int:
    return key.int % 1000


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


@dataclass
class Step:
    name: str
    seconds: float = 0.0
    started: float = 0.0
    ended: float = 0.0
    statements: list[tuple[float, str]] = field(default_factory=list)


def timed_statements(step: Step) -> Callable[..., Any]:
    def wrapper(execute: Any, statement: str, params: Any, many: bool, context: Any) -> Any:
        began = time.monotonic()
        try:
            return execute(statement, params, many, context)
        finally:
            step.statements.append((time.monotonic() - began, " ".join(statement.split())))

    return wrapper


def migrate_step(step: Step) -> None:
    from django.core.management import call_command
    from django.db import connection

    step.started = time.monotonic()
    with (
        connection.execute_wrapper(timed_statements(step)),
        contextlib.redirect_stdout(sys.stderr),  # the fill's progress lines
    ):
        call_command("migrate", "conversations", step.name, interactive=False, verbosity=0)
    step.ended = time.monotonic()
    step.seconds = step.ended - step.started


def writes_in(samples: list[tuple[float, float, str]], start: float, end: float) -> list[Any]:
    return [s for s in samples if s[0] < end and s[1] > start]


def report(
    steps: list[Step], samples: list[tuple[float, float, str]], baseline: tuple[float, float]
) -> None:
    kinds: dict[str, str] = {}
    print("| step | duration s | writes | longest writer stall ms | writer errors |")
    print("|---|---:|---:|---:|---:|")
    idle = writes_in(samples, *baseline)
    if idle:
        median = statistics.median((e - s) * 1000 for s, e, _ in idle)
        longest = max((e - s) * 1000 for s, e, _ in idle)
        print(f"| (writer alone, median {median:.1f} ms) | - | {len(idle)} | {longest:.1f} | 0 |")
    for step in steps:
        during = writes_in(samples, step.started, step.ended)
        longest = max(((e - s) * 1000 for s, e, _ in during), default=0.0)
        errors = sum(1 for *_, error in during if error)
        kinds.update({error: step.name for *_, error in during if error})
        print(
            f"| migrate conversations {step.name[:4]} | {step.seconds:.1f} | {len(during)} "
            f"| {longest:.1f} | {errors} |"
        )
    for error, name in kinds.items():
        print(f"\nwriter error during {name}: {error[:200]}")
    for step in steps:
        print(f"\nslowest statements of {step.name}:")
        for seconds, text in sorted(step.statements, reverse=True)[:4]:
            print(f"  {seconds:7.2f} s  {text[:150]}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--conversations", type=int, default=9_000, help="of --size messages")
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--big", type=int, default=100_000, help="one conversation this long")
    args = parser.parse_args()
    # Stopping the benchmark (a timeout, kill) still drops the scratch database.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(f"stopped by signal {signum}"))
    base = os.environ.get("DATABASE_URL", "")
    url = scratch_url(base, SCRATCH)
    server_execute(base, f"DROP DATABASE IF EXISTS {SCRATCH} WITH (FORCE)")
    server_execute(base, f"CREATE DATABASE {SCRATCH}")
    os.environ.update(DATABASE_URL=url, PARLEY_DB_POOL="false")
    context = multiprocessing.get_context("spawn")
    writer: Any = None
    try:
        from bench.common import django_setup

        django_setup("config.settings.local")
        from django.core.management import call_command
        from django.db import connection
        from django.db.migrations.executor import MigrationExecutor

        call_command("migrate", "conversations", BEFORE, interactive=False, verbosity=0)
        state = MigrationExecutor(connection).loader.project_state(("conversations", BEFORE))
        apps = state.apps
        User = apps.get_model("accounts", "User")
        owner = User.objects.create(username="bench-migrate", password="!")
        sizes = [args.big] + [args.size] * args.conversations
        progress(f"loading {sum(sizes):,} messages in {len(sizes):,} conversations…")
        began = time.monotonic()
        load(apps, owner.pk, sizes)
        progress(f"loaded in {time.monotonic() - began:.0f} s")
        new = MigrationExecutor(connection).loader.project_state(("conversations", STEPS[1])).apps
        plans = [
            Rows(
                historical_row(apps.get_model("conversations", "Conversation"), owner_id=owner.pk),
                historical_row(apps.get_model("conversations", "Message"), seq=1, role="user"),
            ),
            Rows(
                historical_row(new.get_model("conversations", "Conversation"), owner_id=owner.pk),
                historical_row(new.get_model("conversations", "Message"), seq=1, role="user"),
                historical_row(new.get_model("conversations", "Branch"), message_count=1),
            ),
        ]
        mode, stop, out = context.Value("i", 0), context.Event(), context.Queue()
        writer = context.Process(target=writer_main, args=(url, plans, mode, stop, out))
        writer.start()
        time.sleep(1.0)
        baseline = (time.monotonic(), time.monotonic() + 3.0)
        time.sleep(4.0)
        steps = [Step(name) for name in STEPS]
        for step in steps:
            mode.value = 1 if step.name == STEPS[2] else 0
            progress(f"migrate conversations {step.name}…")
            migrate_step(step)
            time.sleep(1.0)
        stop.set()
        samples: list[tuple[float, float, str]] = out.get(timeout=60)
        writer.join(timeout=10)
        print(
            f"bench.migrate_branches: {sum(sizes):,} messages in {len(sizes):,} conversations "
            f"(one of {args.big:,}), a writer every {WRITE_EVERY * 1000:.0f} ms\n"
        )
        report(steps, samples, baseline)
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM conversations_message WHERE branch_id IS NULL")
            print(f"\nmessages without a branch afterwards: {cursor.fetchone()[0]}")
    finally:
        if writer is not None and writer.is_alive():
            writer.terminate()
        with contextlib.suppress(Exception):
            from django.db import connections

            connections.close_all()
        server_execute(base, f"DROP DATABASE IF EXISTS {SCRATCH} WITH (FORCE)")
        progress(f"dropped {SCRATCH}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
