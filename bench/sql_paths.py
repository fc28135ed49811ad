"""Hand-written SQL against the ORM, path by path: what each raw statement saves.

In-process, against the database in DATABASE_URL (PostgreSQL; SQLite only with
--allow-sqlite) and the Redis in REDIS_URL (an embedded Valkey without it): every hot
path that has a hand-written statement is run both ways, the raw one and its ORM
equivalent, on the same rows, `--repeats` times each, interleaved (the order alternates
every round, so machine noise hits both alike), after `--warm-up` rounds. CPU is this
thread's (`time.thread_time`): the statement's building, sending and reading, not the
database's work. Statements are counted once per variant, untimed. The ORM side of a
statement kept raw is its equivalent in tests/support/sql_orm/ (which the tests check it
against); the raw side of a path back on the ORM is the statement it had, kept here.

"calls" is how often the path's unit runs where it is paid (a message sent, a worker's
step, a frame on a socket, an API request); the decision keeps raw SQL only where the
saving on that path, `calls` times the saving per call, is at least a millisecond.
The bench user and its rows are deleted at the end, also on error.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/parley .venv/bin/python -m bench.sql_paths
"""

import argparse
import functools
import os
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from bench.common import django_setup, progress

django_setup("config.settings.local")

from django.conf import settings  # noqa: E402
from django.contrib.auth import HASH_SESSION_KEY, SESSION_KEY  # noqa: E402
from django.contrib.sessions.backends.db import SessionStore  # noqa: E402
from django.contrib.sessions.models import Session  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import DEFAULT_DB_ALIAS, connection, connections, transaction  # noqa: E402
from django.test.utils import CaptureQueriesContext  # noqa: E402
from django.utils import timezone  # noqa: E402

from accounts import socket_checks  # noqa: E402
from accounts import sql as accounts_sql  # noqa: E402
from accounts.models import User  # noqa: E402
from accounts.selectors import api_key_for_secret  # noqa: E402
from accounts.services import api_key_create, api_key_hash  # noqa: E402
from bench.common import database_refused, owner_delete  # noqa: E402
from conversations import services  # noqa: E402
from conversations.engine import lease as leases  # noqa: E402
from conversations.models import Branch, Conversation, Message, Run  # noqa: E402
from conversations.selectors.history import path_history  # noqa: E402
from conversations.services.messages import (  # noqa: E402
    LOCKED_FIELDS,
    NewMessage,
    branch_target,
    conversation_lock,
)
from conversations.services.runs import RunLock, conversation_lock_for_run  # noqa: E402
from conversations.services.usage import usage_increments  # noqa: E402
from tests.support.redis_server import redis_start  # noqa: E402
from tests.support.sql_orm import accounts as accounts_orm  # noqa: E402
from tests.support.sql_orm import conversations as sql_orm  # noqa: E402

THRESHOLD_MS = 1.0
REPLY_USAGE = {"prompt_tokens": 1200, "completion_tokens": 80, "total_tokens": 1280}


# --- the hand-written statements' paths the ORM way (tests/support/sql_orm/) ---------------


def lock_read_orm(*, conversation: Conversation, client_id: str) -> RunLock:
    found = sql_orm.conversation_run_lock(
        conversation_id=conversation.pk,
        owner_id=conversation.owner_id,
        client_id=client_id,
        fields=(*LOCKED_FIELDS, "model"),
    )
    if found is None:
        raise Conversation.DoesNotExist
    return RunLock(*found)


def messages_append_orm(*, conversation: Conversation, messages: list[NewMessage]) -> None:
    """`services.messages_append` the ORM way: the branch read, then the writes."""
    with transaction.atomic(savepoint=False):
        locked = conversation_lock(conversation)
        branch = branch_target(locked=locked, branch_id=None)
        now = timezone.now()
        start = branch.message_count
        rows = [
            Message(
                **{
                    **new.row_values(),
                    "id": new.id or uuid.uuid4(),
                    "conversation_id": conversation.pk,
                    "branch_id": branch.pk,
                    "seq": start + offset + 1,
                    "created_at": new.created_at or now,
                }
            )
            for offset, new in enumerate(messages)
        ]
        sql_orm.messages_append_write(
            messages=rows,
            usage=usage_increments(
                owner_id=locked.owner_id, conversation_id=conversation.pk, messages=rows
            ),
            branch_count=(branch.pk, start + len(rows)),
            conversation_id=conversation.pk,
            conversation_values={
                "message_count": locked.message_count + len(rows),
                "last_activity_at": now,
            },
        )


def lease_take_orm(run_id: str) -> leases.Taken | None:
    now, token = timezone.now(), uuid.uuid4()
    until = now + timedelta(seconds=settings.PARLEY_RUN_LEASE_SECONDS)
    run = sql_orm.run_lease_take(run_id=run_id, token=token, now=now, until=until)
    if run is None:
        return None
    lease = leases.Lease(run_id=run.pk, token=token)
    return leases.Taken(run=run, lease=lease, started=run.started_at == now)


def leases_renew_orm(held: list[leases.Lease]) -> tuple[set[uuid.UUID], set[uuid.UUID]]:
    pairs = [(lease.run_id, lease.token) for lease in held]
    renewed = sql_orm.run_leases_renew(leases=pairs, until=leases.Lease.until())
    return {pk for pk, _ in renewed}, {pk for pk, stop in renewed if stop}


def api_key_for_secret_orm(*, secret: str) -> object:
    return accounts_orm.api_key_by_hash(hashed_secret=api_key_hash(secret=secret))


# --- the paths back on the ORM, by the hand-written SQL they had ---------------------------

_RUNS = accounts_sql.Rows(Run)


def run_insert_raw(values: dict[str, Any]) -> Run:
    run = _RUNS.new(values)
    accounts_sql.execute(_RUNS.insert([run]))
    return run


def run_insert_orm(values: dict[str, Any]) -> Run:
    return Run.objects.create(**values)


@functools.cache
def _lease_update_sql(names: tuple[str, ...], active: bool) -> str:
    sets = ", ".join(f"{accounts_sql.column(Run, name)} = %s" for name in names)
    sql = (
        f"UPDATE {_RUNS.table} SET {sets} WHERE {accounts_sql.column(Run, 'id')} = %s "
        f"AND {accounts_sql.column(Run, 'lease_token')} = %s"
    )
    if active:
        marks = ", ".join(["%s"] * len(Run.ACTIVE_STATUSES))
        sql += f" AND {accounts_sql.column(Run, 'status')} IN ({marks})"
    return sql


def lease_update_raw(lease: leases.Lease, values: dict[str, Any], *, active: bool) -> bool:
    db = connections[DEFAULT_DB_ALIAS]
    params = [
        Run._meta.get_field(name).get_db_prep_save(value, db)  # type: ignore[union-attr]
        for name, value in values.items()
    ]
    params += [
        Run._meta.get_field(name).get_db_prep_value(value, db)  # type: ignore[union-attr]
        for name, value in (("id", lease.run_id), ("lease_token", lease.token))
    ]
    if active:
        params += [str(status) for status in Run.ACTIVE_STATUSES]
    with db.cursor() as cursor:
        cursor.execute(_lease_update_sql(tuple(values), active), params)
        return bool(cursor.rowcount)


def user_password_raw(*, user_id: int) -> str | None:
    table = connection.ops.quote_name(User._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT password FROM {table} WHERE id = %s AND is_active = %s", [user_id, True]
        )
        row = cursor.fetchone()
    return None if row is None else str(row[0])


# --- the paths ------------------------------------------------------------------------------


@dataclass
class Path:
    name: str
    calls: int  # runs of the unit where it is paid (see the module's docstring)
    raw: Callable[[], object]
    orm: Callable[[], object]
    reset: Callable[[], object] = lambda: None
    atomic: bool = False  # timed inside a transaction (as its callers call it)


def seeded(owner: User, title: str, size: int, *, tool_share: int = 0) -> Conversation:
    """A conversation of `size` messages (every `tool_share`-th assistant turn calls a tool)."""
    conversation = services.conversation_create(owner=owner, title=title)
    branch = Branch.objects.get(conversation=conversation)
    rows = []
    for seq in range(1, size + 1):
        calls = []
        if seq % 2 == 0 and tool_share and (seq // 2) % tool_share == 0:
            calls = [{"id": f"call_{seq}", "name": "calculator", "arguments": '{"x": 1}'}]
        rows.append(
            Message(
                conversation=conversation,
                branch=branch,
                seq=seq,
                role=Message.Role.ASSISTANT if seq % 2 == 0 else Message.Role.USER,
                content=f"message {seq} " + "words " * 30,
                tool_calls=calls,
            )
        )
    Message.objects.bulk_create(rows, batch_size=1000)
    Conversation.objects.filter(pk=conversation.pk).update(message_count=size)
    Branch.objects.filter(pk=branch.pk).update(message_count=size)
    conversation.refresh_from_db()
    return conversation


def run_queued(conversation: Conversation) -> Run:
    trigger = Message.objects.filter(conversation=conversation).order_by("-seq").first()
    return Run.objects.create(
        conversation=conversation,
        branch_id=conversation.active_branch_id,
        trigger_message=trigger,
        model="bench",
    )


def paths_build(owner: User) -> list[Path]:
    paths: list[Path] = []
    # A message sent: the lock read at the run's start, with a client id.
    locking = seeded(owner, "lock", 10)
    caller = Conversation.from_db("default", ("id", "owner_id"), (locking.pk, owner.pk))
    paths.append(
        Path(
            "message sent: the run start's lock read",
            1,
            lambda: conversation_lock_for_run(conversation=caller, client_id="c-1"),
            lambda: lock_read_orm(conversation=caller, client_id="c-1"),
            atomic=True,
        )
    )
    # A reply stored (and a message sent): the append, its rollup and counters.
    appending = seeded(owner, "append", 10)
    reply = [NewMessage(role=Message.Role.ASSISTANT, content="A reply.", usage=REPLY_USAGE)]
    paths.append(
        Path(
            "message sent / reply stored: an append",
            1,
            lambda: services.messages_append(conversation=appending, messages=reply),
            lambda: messages_append_orm(conversation=appending, messages=reply),
        )
    )
    # A message sent: the run's insert.
    inserting = seeded(owner, "insert", 2)
    trigger = Message.objects.get(conversation=inserting, seq=1)

    def run_values() -> dict[str, Any]:
        return {
            "id": uuid.uuid4(),
            "conversation_id": inserting.pk,
            "branch_id": inserting.active_branch_id,
            "trigger_message_id": trigger.pk,
            "model": "bench",
            "client_id": "",
        }

    paths.append(
        Path(
            "message sent: the run's insert",
            1,
            lambda: run_insert_raw(run_values()),
            lambda: run_insert_orm(run_values()),
            reset=lambda: Run.objects.filter(conversation=inserting).update(
                status=Run.Status.COMPLETED
            ),
            atomic=True,
        )
    )
    # A worker's step: the lease taken (and the run, conversation, owner, branch read).
    taking = run_queued(seeded(owner, "lease", 4))
    free = Run.objects.filter(pk=taking.pk)
    paths.append(
        Path(
            "step: take the lease",
            1,
            lambda: leases.lease_take(str(taking.pk)),
            lambda: lease_take_orm(str(taking.pk)),
            reset=lambda: free.update(lease_expires_at=None, status=Run.Status.QUEUED),
        )
    )
    held = leases.Lease(run_id=taking.pk, token=uuid.uuid4())

    def hold() -> None:
        free.update(status=Run.Status.IN_PROGRESS, lease_token=held.token)

    paths.append(
        Path(
            "step: renew the lease",
            1,
            lambda: lease_update_raw(held, {"lease_expires_at": held.until()}, active=False),
            lambda: held.update(lease_expires_at=held.until()),
            reset=hold,
        )
    )

    def ending() -> dict[str, Any]:
        now = timezone.now()
        return {
            "status": Run.Status.COMPLETED,
            "error": None,
            "finished_at": now,
            "updated_at": now,
            "lease_expires_at": None,
            "lease_token": None,
            "iterations": 1,
        }

    paths.append(
        Path(
            "step: end the run under its lease",
            1,
            lambda: lease_update_raw(held, ending(), active=True),
            lambda: held.end(**ending()),
            reset=hold,
            atomic=True,
        )
    )
    # The streaming replies of a worker process, renewed together (20 here).
    streaming = [run_queued(seeded(owner, f"renew {n}", 2)) for n in range(20)]
    renewing = [leases.Lease(run_id=run.pk, token=uuid.uuid4()) for run in streaming]
    for lease in renewing:
        Run.objects.filter(pk=lease.run_id).update(
            status=Run.Status.IN_PROGRESS, lease_token=lease.token
        )
    paths.append(
        Path(
            "worker: renew 20 streaming leases",
            1,
            lambda: leases.leases_renew(renewing),
            lambda: leases_renew_orm(renewing),
        )
    )
    # A model call's input: the history along a two-segment path (the default cap).
    long = seeded(owner, "history", 300, tool_share=3)
    root = Branch.objects.get(conversation=long)
    fork = services.branch_fork(conversation=long, source=root, fork_seq=200)
    Message.objects.bulk_create(
        Message(
            conversation=long,
            branch=fork,
            seq=seq,
            role=Message.Role.ASSISTANT if seq % 2 == 0 else Message.Role.USER,
            content=f"message {seq} " + "words " * 30,
        )
        for seq in range(201, 401)
    )
    Branch.objects.filter(pk=fork.pk).update(message_count=400)
    fork.refresh_from_db()
    for size in (400, 20):
        first = 400 - size
        paths.append(
            Path(
                f"step: read the model's history, {size} messages",
                1,
                functools.partial(path_history, fork, after=first, last=400),
                functools.partial(sql_orm.path_history_read, branch=fork, after=first, last=400),
            )
        )
    # A frame on a socket: its credential checked, a key's or a session's.
    key, secret = api_key_create(owner=owner, name="bench")
    paths.append(
        Path(
            "socket frame: check an API key credential",
            1,
            lambda: accounts_sql.api_key_live(user_id=owner.pk, api_key_id=key.pk),
            lambda: accounts_orm.api_key_live(user_id=owner.pk, api_key_id=key.pk),
        )
    )
    store = SessionStore()
    store[SESSION_KEY] = str(owner.pk)
    store[HASH_SESSION_KEY] = owner.get_session_auth_hash()
    store.create()
    session_key = store.session_key
    assert session_key is not None
    paths.append(
        Path(
            "socket frame: check a session credential",
            1,
            lambda: accounts_sql.user_session_read(
                user_id=owner.pk, session_key=session_key, session_model=Session
            ),
            lambda: accounts_orm.user_session_read(
                user_id=owner.pk, session_key=session_key, session_model=Session
            ),
        )
    )
    paths.append(
        Path(
            "socket frame: check a session credential, sessions kept elsewhere",
            1,
            lambda: user_password_raw(user_id=owner.pk),
            lambda: socket_checks.user_password(user_id=owner.pk),
        )
    )
    paths.append(
        Path(
            "API request: look up the API key",
            1,
            lambda: api_key_for_secret(secret=secret),
            lambda: api_key_for_secret_orm(secret=secret),
        )
    )
    return paths


def once(path: Path, variant: Callable[[], object]) -> float:
    """One timed call (CPU seconds of this thread), after the path's untimed reset."""
    path.reset()
    if path.atomic:
        with transaction.atomic():
            started = time.thread_time()
            variant()
            spent = time.thread_time() - started
    else:
        started = time.thread_time()
        variant()
        spent = time.thread_time() - started
    return spent


def statements(path: Path, variant: Callable[[], object]) -> int:
    path.reset()
    with CaptureQueriesContext(connection) as captured:
        if path.atomic:
            with transaction.atomic():
                variant()
        else:
            variant()
    ends = ("BEGIN", "COMMIT", "SAVEPOINT", "RELEASE SAVEPOINT")
    return sum(1 for query in captured if not query["sql"].startswith(ends))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=300, help="timed calls per variant")
    parser.add_argument("--warm-up", type=int, default=20)
    parser.add_argument("--allow-sqlite", action="store_true")
    args = parser.parse_args()
    if args.repeats < 2:
        parser.error("need --repeats >= 2")
    if database_refused("sql_paths", args.allow_sqlite):
        return 2
    call_command("migrate", interactive=False, verbosity=0)
    # The services notify other tabs after commit: REDIS_URL, or an embedded Valkey.
    _, redis_stop = redis_start()
    owner = User.objects.create_user(username=f"bench-sql-{time.time_ns()}", password="x")
    try:
        paths = paths_build(owner)
        counts = {p.name: (statements(p, p.raw), statements(p, p.orm)) for p in paths}
        samples: dict[str, tuple[list[float], list[float]]] = {p.name: ([], []) for p in paths}
        for number in range(args.warm_up + args.repeats):
            for path in paths:
                raw, orm = samples[path.name]
                pairs = [(raw, path.raw), (orm, path.orm)]
                for into, variant in pairs if number % 2 else pairs[::-1]:
                    spent = once(path, variant)
                    if number >= args.warm_up:
                        into.append(spent * 1000)
            if number % 50 == 0:
                progress(f"{number}/{args.warm_up + args.repeats} rounds")
        report(paths, samples, counts, args.repeats)
    finally:
        owner_delete(owner)
        redis_stop()
    return 0


def report(
    paths: list[Path],
    samples: dict[str, tuple[list[float], list[float]]],
    counts: dict[str, tuple[int, int]],
    repeats: int,
) -> None:
    load = ", ".join(f"{figure:.2f}" for figure in os.getloadavg())
    print(
        f"bench.sql_paths on {connection.vendor}, repeats={repeats}, load average {load}, "
        "CPU ms per call (time.thread_time), median\n"
    )
    print(
        "| path | raw median ms | ORM median ms | saving ms | calls | statements raw / ORM "
        "| decision |\n|---|---:|---:|---:|---:|---|---|"
    )
    for path in paths:
        raw_ms = statistics.median(samples[path.name][0])
        orm_ms = statistics.median(samples[path.name][1])
        saving = (orm_ms - raw_ms) * path.calls
        decision = "keep raw" if saving >= THRESHOLD_MS else "ORM"
        raw_count, orm_count = counts[path.name]
        print(
            f"| {path.name} | {raw_ms:.3f} | {orm_ms:.3f} | {saving:.3f} | {path.calls} "
            f"| {raw_count} / {orm_count} | {decision} |"
        )


if __name__ == "__main__":
    sys.exit(main())
