"""A step's lease on its run, kept alive while the step waits on something slow.

A step works on a run only while it holds the run's lease (`Run.lease_token`, until
`lease_expires_at`); once the lease expires the watchdog hands the run to another worker.
So a step renews it whenever a third of it is used: while a reply streams (the step's
thread wakes about once a second, conversations/engine/runner.py) and while a tool runs
(`tool_execute` calls `Lease.keepalive` as it waits). Between renewals it holds no
database connection (`release_connection`).
"""

import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection
from django.db.models import QuerySet
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
