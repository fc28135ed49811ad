"""A step's lease on its run, kept alive while the step waits on something slow.

A step works on a run only while it holds the run's lease (`Run.lease_token`, until
`lease_expires_at`); once the lease expires the watchdog hands the run to another worker.
So a step renews it whenever a third of it is used: while a tool runs (`tool_execute`
calls `Lease.keepalive` as it waits), and while a reply streams, where the process renews
the leases of all its streaming replies together (`leases_renew`, used by
conversations/engine/inflight.py). Between renewals it holds no database connection
(`release_connection`).

Taking a lease is the first thing of every step, and renewing the leases of the streaming
replies is one statement per period: both are written once, as SQL (conversations/sql),
where the ORM would cost a millisecond or more of CPU each. The updates that check a
lease (`Lease.update`) are plain ORM updates.
"""

import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection
from django.db.models import QuerySet
from django.utils import timezone

from conversations import sql
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

    def update(self, **values: Any) -> bool:
        """`mine().update(**values)`: whether the lease still held the run."""
        return bool(self.mine().update(**values))

    def end(self, **values: Any) -> bool:
        """`update`, on the condition that the run is still active too (it ends here)."""
        return bool(self.mine().filter(status__in=Run.ACTIVE_STATUSES).update(**values))

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


def leases_renew(leases: list[Lease]) -> tuple[set[uuid.UUID], set[uuid.UUID]]:
    """Renew many leases, a few hundred a statement: the runs whose lease is still ours
    (now renewed), and those among them with a stop requested. A run missing from the
    first set has been taken over: its step must stop without writing."""
    renewed = sql.run_leases_renew(
        leases=[(lease.run_id, lease.token) for lease in leases], until=Lease.until()
    )
    held = {run_id for run_id, _ in renewed}
    stopping = {run_id for run_id, stop in renewed if stop}
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
    now = timezone.now()
    token = uuid.uuid4()
    until = now + timedelta(seconds=settings.PARLEY_RUN_LEASE_SECONDS)
    run = sql.run_lease_take(run_id=run_id, token=token, now=now, until=until)
    if run is None:
        return None
    return Taken(run=run, lease=Lease(run_id=run.pk, token=token), started=run.started_at == now)
