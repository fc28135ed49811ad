"""Runs' hand-written statements: the lock a run's start takes, a step's lease taken, and
the leases of a process's streaming replies renewed together."""

import uuid
from collections.abc import Sequence
from datetime import datetime
from functools import cache
from typing import Any

from django.db import DEFAULT_DB_ALIAS, connection, connections
from django.db.models import UUIDField

from accounts.models import User
from accounts.sql import Rows, column
from conversations.models import Branch, Conversation, Run

_RUNS = Rows(Run)
_CONVERSATIONS = Rows(Conversation)
_OWNERS = Rows(User)
_BRANCHES = Rows(Branch)
# The fields' own conversions: SQLite keeps UUIDs as hex text, PostgreSQL as uuid.
_UUIDS: "UUIDField[uuid.UUID, uuid.UUID]" = UUIDField()

# Rows per renewing statement: a process streaming thousands of replies renews them in a
# few statements, each with a bounded parameter list (SQLite allows 32,766).
RENEW_BATCH = 500


def _active_marks() -> str:
    return ", ".join(["%s"] * len(Run.ACTIVE_STATUSES))


def _active_params() -> list[str]:
    return [str(status) for status in Run.ACTIVE_STATUSES]


# --- the lock a run's start takes -----------------------------------------------------------


@cache
def _locked_rows(fields: tuple[str, ...]) -> Rows[Conversation]:
    return Rows(Conversation, fields)


@cache
def _lock_sql(fields: tuple[str, ...], *, client_id: bool) -> str:
    quote = connection.ops.quote_name
    key = column(Conversation, "id")
    runs = (
        f"SELECT 1 FROM {quote(Run._meta.db_table)} r "
        f"WHERE r.{column(Run, 'conversation')} = c.{key}"
    )
    active = f"EXISTS ({runs} AND r.{column(Run, 'status')} IN ({_active_marks()}))"
    taken = f"EXISTS ({runs} AND r.{column(Run, 'client_id')} = %s)"
    lock = " FOR UPDATE" if connection.features.has_select_for_update else ""
    return (
        f"SELECT {_locked_rows(fields).columns('c')}, {active} AS run_active, "
        f"{taken if client_id else '0 = 1'} AS client_id_taken "
        f"FROM {quote(Conversation._meta.db_table)} c "
        f"WHERE c.{key} = %s AND c.{column(Conversation, 'owner')} = %s{lock}"
    )


def conversation_run_lock(
    *, conversation_id: uuid.UUID, owner_id: int, client_id: str, fields: tuple[str, ...]
) -> tuple[Conversation, bool, bool] | None:
    """The owner's conversation, its `fields` read under a row lock (SELECT ... FOR UPDATE
    on PostgreSQL), with whether a run of it is active and whether `client_id` (if given)
    already started one; None when the conversation is not there or not the owner's.
    Inside the caller's transaction."""
    params: list[Any] = _active_params()
    if client_id:
        params.append(client_id)
    params += [_UUIDS.get_db_prep_value(conversation_id, connection), owner_id]
    with connection.cursor() as cursor:
        cursor.execute(_lock_sql(fields, client_id=bool(client_id)), params)
        row = cursor.fetchone()
    if row is None:
        return None
    return _locked_rows(fields).read(row), bool(row[-2]), bool(row[-1])


# --- a step's lease -------------------------------------------------------------------------


def run_lease_take(
    *, run_id: uuid.UUID | str, token: uuid.UUID, now: datetime, until: datetime
) -> Run | None:
    """Take the run's lease if it is free (never taken, or expired before `now`) and the
    run active: a conditional UPDATE that also marks it in progress, counts the attempt and
    sets `started_at` unless it was set. None when another step holds it or the run has
    ended; otherwise the run with its conversation, the conversation's owner and its branch,
    read in the same statement on PostgreSQL (elsewhere right after)."""
    db = connections[DEFAULT_DB_ALIAS]
    key = _UUIDS.get_db_prep_value(run_id, db)
    moment = db.ops.adapt_datetimefield_value(now)
    params = [
        Run.Status.IN_PROGRESS.value,
        _UUIDS.get_db_prep_value(token, db),
        db.ops.adapt_datetimefield_value(until),
        moment,  # started_at, unless the run had started before
        moment,  # updated_at
        key,
        *_active_params(),
        moment,
    ]
    statements = _take_sql(db.vendor)
    with db.cursor() as cursor:
        cursor.execute(statements[0], params)
        if len(statements) > 1:
            if cursor.rowcount != 1:
                return None
            cursor.execute(statements[1], [key])
        row = cursor.fetchone()
    if row is None:
        return None
    run = _RUNS.read(row)
    at = len(_RUNS.fields)
    conversation = _CONVERSATIONS.read(row[at:])
    at += len(_CONVERSATIONS.fields)
    conversation.owner = _OWNERS.read(row[at:])
    at += len(_OWNERS.fields)
    run.conversation = conversation
    if row[at] is not None:  # the branch's id
        run.branch = _BRANCHES.read(row[at:])
    return run


@cache
def _take_sql(vendor: str) -> Sequence[str]:
    """The statements of `run_lease_take`: on PostgreSQL the UPDATE in a CTE that the read
    joins, one round trip; elsewhere (SQLite) the UPDATE, then the read."""

    def run(name: str) -> str:
        return column(Run, name)

    update = (
        f"UPDATE {_RUNS.table} SET {run('status')} = %s, {run('lease_token')} = %s, "
        f"{run('lease_expires_at')} = %s, {run('attempt')} = {run('attempt')} + 1, "
        f"{run('started_at')} = COALESCE({run('started_at')}, %s), {run('updated_at')} = %s "
        f"WHERE {run('id')} = %s AND {run('status')} IN ({_active_marks()}) "
        f"AND ({run('lease_expires_at')} IS NULL OR {run('lease_expires_at')} < %s)"
    )
    select = (
        f"SELECT {_RUNS.columns('r')}, {_CONVERSATIONS.columns('c')}, "
        f"{_OWNERS.columns('u')}, {_BRANCHES.columns('b')}"
    )
    joins = (
        f"JOIN {_CONVERSATIONS.table} c ON c.{column(Conversation, 'id')} = "
        f"r.{run('conversation')} "
        f"JOIN {_OWNERS.table} u ON u.{column(User, 'id')} = c.{column(Conversation, 'owner')} "
        f"LEFT JOIN {_BRANCHES.table} b ON b.{column(Branch, 'id')} = r.{run('branch')}"
    )
    if vendor == "postgresql":
        taken = f"WITH r AS ({update} RETURNING {_RUNS.columns()})"
        return [f"{taken} {select} FROM r {joins}"]
    return [update, f"{select} FROM {_RUNS.table} r {joins} WHERE r.{run('id')} = %s"]


def run_leases_renew(
    *, leases: Sequence[tuple[uuid.UUID, uuid.UUID]], until: datetime
) -> list[tuple[uuid.UUID, bool]]:
    """Move the expiry of these `(run id, lease token)` leases to `until`, one statement
    per RENEW_BATCH, each UPDATE ... RETURNING the rows it renewed: the runs whose lease
    was still held, each with whether a stop was requested. A lease is matched by its run
    and its token together (tokens are random per lease), through the primary key, so the
    statement touches only these rows."""
    renewed: list[tuple[uuid.UUID, bool]] = []
    table = connection.ops.quote_name(Run._meta.db_table)
    moment = connection.ops.adapt_datetimefield_value(until)
    for start in range(0, len(leases), RENEW_BATCH):
        batch = leases[start : start + RENEW_BATCH]
        marks = ", ".join(["%s"] * len(batch))
        params: list[Any] = [moment]
        params += [_UUIDS.get_db_prep_value(run_id, connection) for run_id, _ in batch]
        params += [_UUIDS.get_db_prep_value(token, connection) for _, token in batch]
        with connection.cursor() as cursor:
            cursor.execute(
                f"UPDATE {table} SET {column(Run, 'lease_expires_at')} = %s "
                f"WHERE {column(Run, 'id')} IN ({marks}) "
                f"AND {column(Run, 'lease_token')} IN ({marks}) "
                # The column itself: SQLite (3.40) gets `IS NOT NULL` wrong in RETURNING.
                f"RETURNING {column(Run, 'id')}, {column(Run, 'cancel_requested_at')}",
                params,
            )
            rows = cursor.fetchall()
        for raw_id, cancel_requested_at in rows:
            run_id = raw_id if isinstance(raw_id, uuid.UUID) else uuid.UUID(str(raw_id))
            renewed.append((run_id, cancel_requested_at is not None))
    return renewed
