"""A step's lease on its run, kept alive while the step waits on something slow.

A step works on a run only while it holds the run's lease (`Run.lease_token`, until
`lease_expires_at`); once the lease expires the watchdog hands the run to another worker.
So a step renews it whenever a third of it is used: while a tool runs (`tool_execute`
calls `Lease.keepalive` as it waits), and while a reply streams, where the process renews
the leases of all its streaming replies together (`leases_renew`, used by
conversations/engine/inflight.py). Between renewals it holds no database connection
(`release_connection`).
"""

import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection
from django.db.models import QuerySet, UUIDField
from django.utils import timezone

from conversations.models import Run


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

    def renew(self) -> None:
        if not self.mine().update(lease_expires_at=self.until()):
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
