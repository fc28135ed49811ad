"""A step's lease on its run, kept alive while the step waits on something slow.

A step works on a run only while it holds the run's lease (`Run.lease_token`, until
`lease_expires_at`); once the lease expires the watchdog hands the run to another worker.
So a step renews it whenever a third of it is used: while a tool runs (`tool_execute`
calls `Lease.keepalive` as it waits), and while a reply streams, where the process renews
the leases of all its streaming replies together (`leases_renew`, used by
conversations/engine/inflight.py). Between renewals it holds no database connection
(`release_connection`).

Taking a lease is the first thing of every step, so its statements are written once, as
SQL (`lease_take`), and so are the updates that check it (`Lease.update`): the ORM spent
more CPU compiling them than the database spent running them.
"""

import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import cache
from typing import Any

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connection, connections
from django.db.models import QuerySet, UUIDField
from django.utils import timezone

from accounts.models import User
from config.rows import Rows
from conversations.models import Branch, Conversation, Run
from conversations.services.common import column

_RUNS = Rows(Run)
_CONVERSATIONS = Rows(Conversation)
_OWNERS = Rows(User)
_BRANCHES = Rows(Branch)
# The fields' own conversions: SQLite keeps UUIDs as hex text, PostgreSQL as uuid.
_UUIDS: "UUIDField[uuid.UUID, uuid.UUID]" = UUIDField()


class LeaseLost(Exception):
    """Another worker owns this run now; this step must stop without writing."""


def release_connection() -> None:
    """Give the database connection back while the step waits on the model or a tool.

    A streaming step spends seconds on the upstream and needs the database only at its
    ends, so a worker with a thread per streaming run would otherwise hold as many
    connections as runs and reach PostgreSQL's limit (100 by default) long before its
    CPU is busy. The next query reconnects.
    """
    if not connection.in_atomic_block:
        connection.close()


@dataclass
class Lease:
    run_id: uuid.UUID
    token: uuid.UUID
    renewed_at: float = field(default_factory=time.monotonic)

    @staticmethod
    def until() -> datetime:
        return timezone.now() + timedelta(seconds=settings.PARLEY_RUN_LEASE_SECONDS)

    @staticmethod
    def period() -> float:
        """How often to renew: every third of the lease."""
        return max(settings.PARLEY_RUN_LEASE_SECONDS / 3, 0.05)

    def mine(self) -> QuerySet[Run]:
        return Run.objects.filter(pk=self.run_id, lease_token=self.token)

    def update(self, **values: Any) -> bool:
        """`mine().update(**values)` for plain values (no expressions), by a statement
        written once per set of fields: whether the lease still held the run."""
        return self._update(values, active=False)

    def end(self, **values: Any) -> bool:
        """`update`, on the condition that the run is still active too (it ends here)."""
        return self._update(values, active=True)

    def _update(self, values: dict[str, Any], *, active: bool) -> bool:
        db = connections[DEFAULT_DB_ALIAS]
        names = tuple(values)
        params = [
            _field(name).get_db_prep_save(value, db)
            for name, value in zip(names, values.values(), strict=True)
        ]
        params += [_UUIDS.get_db_prep_value(self.run_id, db)]
        params += [_UUIDS.get_db_prep_value(self.token, db)]
        if active:
            params += [str(status) for status in Run.ACTIVE_STATUSES]
        with db.cursor() as cursor:
            cursor.execute(_update_sql(names, active), params)
            return bool(cursor.rowcount)

    def renew(self) -> None:
        if not self.update(lease_expires_at=self.until()):
            raise LeaseLost
        self.renewed_at = time.monotonic()

    def renew_when_due(self) -> bool:
        """Renew if a third of the lease is used; says whether it did."""
        if time.monotonic() - self.renewed_at < self.period():
            return False
        self.renew()
        return True

    def keepalive(self) -> None:
        """Renew, then give the connection back: the step goes on waiting (on a tool)."""
        self.renew()
        release_connection()


# Rows per renewing statement: a process streaming thousands of replies renews them in a
# few statements, each with a bounded parameter list (SQLite allows 32,766).
RENEW_BATCH = 500


def leases_renew(leases: list[Lease]) -> tuple[set[uuid.UUID], set[uuid.UUID]]:
    """Renew many leases in one statement per RENEW_BATCH: the runs whose lease is still
    ours (now renewed), and those among them with a stop requested. A run missing from
    the first set has been taken over: its step must stop without writing.

    A lease is matched by its run and its token together (tokens are random per lease),
    through the primary key, so the statement touches only these rows."""
    held: set[uuid.UUID] = set()
    stopping: set[uuid.UUID] = set()
    table = connection.ops.quote_name(Run._meta.db_table)
    # The fields' own conversions: SQLite keeps UUIDs as hex text, PostgreSQL as uuid.
    uuids: UUIDField[uuid.UUID, uuid.UUID] = UUIDField()
    until = connection.ops.adapt_datetimefield_value(Lease.until())
    for start in range(0, len(leases), RENEW_BATCH):
        batch = leases[start : start + RENEW_BATCH]
        marks = ", ".join(["%s"] * len(batch))
        params: list[Any] = [until]
        params += [uuids.get_db_prep_value(lease.run_id, connection) for lease in batch]
        params += [uuids.get_db_prep_value(lease.token, connection) for lease in batch]
        with connection.cursor() as cursor:
            cursor.execute(
                f"UPDATE {table} SET lease_expires_at = %s "
                f"WHERE id IN ({marks}) AND lease_token IN ({marks}) "
                # The column itself: SQLite (3.40) gets `IS NOT NULL` wrong in RETURNING.
                "RETURNING id, cancel_requested_at",
                params,
            )
            rows = cursor.fetchall()
        for raw_id, cancel_requested_at in rows:
            run_id = raw_id if isinstance(raw_id, uuid.UUID) else uuid.UUID(str(raw_id))
            held.add(run_id)
            if cancel_requested_at is not None:
                stopping.add(run_id)
    now = time.monotonic()
    for lease in leases:
        if lease.run_id in held:
            lease.renewed_at = now
    return held, stopping


@dataclass(frozen=True)
class Taken:
    """A lease just taken: the run (with its conversation, the owner and its branch read
    along), the lease, and whether this step started the run (it was queued until now)."""

    run: Run
    lease: Lease
    started: bool


def lease_take(run_id: str) -> Taken | None:
    """Take the run's lease if it is free (never taken, or expired) and the run active: a
    conditional UPDATE that also marks it in progress and counts the attempt; None when
    another step holds it or the run has ended. The run comes back with everything a step
    begins with, on PostgreSQL in the same statement."""
    db = connections[DEFAULT_DB_ALIAS]
    now = timezone.now()
    token = uuid.uuid4()
    key = _UUIDS.get_db_prep_value(run_id, db)
    moment = db.ops.adapt_datetimefield_value(now)
    until = db.ops.adapt_datetimefield_value(
        now + timedelta(seconds=settings.PARLEY_RUN_LEASE_SECONDS)
    )
    params = [
        Run.Status.IN_PROGRESS.value,
        _UUIDS.get_db_prep_value(token, db),
        until,
        moment,  # started_at, unless the run had started before
        moment,  # updated_at
        key,
        *[str(status) for status in Run.ACTIVE_STATUSES],
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
    lease = Lease(run_id=run.pk, token=token)
    return Taken(run=run, lease=lease, started=run.started_at == now)


@cache
def _take_sql(vendor: str) -> Sequence[str]:
    """The statements of `lease_take`: on PostgreSQL the UPDATE in a CTE that the read
    joins, one round trip; elsewhere (SQLite) the UPDATE, then the read."""

    def run(name: str) -> str:
        return column(Run, name)

    active = ", ".join(["%s"] * len(Run.ACTIVE_STATUSES))
    update = (
        f"UPDATE {_RUNS.table} SET {run('status')} = %s, {run('lease_token')} = %s, "
        f"{run('lease_expires_at')} = %s, {run('attempt')} = {run('attempt')} + 1, "
        f"{run('started_at')} = COALESCE({run('started_at')}, %s), {run('updated_at')} = %s "
        f"WHERE {run('id')} = %s AND {run('status')} IN ({active}) "
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


def _field(name: str) -> Any:
    return Run._meta.get_field(name)


@cache
def _update_sql(names: tuple[str, ...], active: bool) -> str:
    sets = ", ".join(f"{column(Run, name)} = %s" for name in names)
    sql = (
        f"UPDATE {_RUNS.table} SET {sets} "
        f"WHERE {column(Run, 'id')} = %s AND {column(Run, 'lease_token')} = %s"
    )
    if active:
        sql += f" AND {column(Run, 'status')} IN ({', '.join(['%s'] * len(Run.ACTIVE_STATUSES))})"
    return sql
