"""The watchdog: a periodic sweep (Celery beat) that keeps runs moving after crashes."""

from datetime import timedelta

from django.conf import settings
from django.utils import timezone

from conversations.engine import dispatch
from conversations.engine.runs import run_end_repair
from conversations.models import Run

REPAIR_AFTER_SECONDS = 10


def runs_watchdog() -> dict[str, int]:
    """Re-enqueue runs whose worker died (lease expired) or that no worker picked up, and
    publish terminal events a dying worker committed but never wrote."""
    now = timezone.now()
    expired = list(
        Run.objects.filter(status=Run.Status.IN_PROGRESS, lease_expires_at__lt=now).values_list(
            "id", flat=True
        )
    )
    grace = now - timedelta(seconds=settings.PARLEY_RUN_QUEUED_GRACE_SECONDS)
    # Queued and never picked up, or handed over between steps with the next step's
    # task lost (the worker died between commit and enqueue).
    stuck = list(
        Run.objects.filter(
            status__in=Run.ACTIVE_STATUSES, lease_expires_at__isnull=True, updated_at__lt=grace
        ).values_list("id", flat=True)
    )
    # Touch them so the next sweep waits a full grace period before enqueueing again.
    Run.objects.filter(pk__in=stuck).update(updated_at=now)
    for run_id in [*expired, *stuck]:
        dispatch.step_enqueue(str(run_id))
    # Only runs finished a little while ago: a worker writes its last events just after
    # the commit, and a repair inside that gap would take their place in the log.
    recent = Run.objects.filter(
        finished_at__gte=now - timedelta(seconds=120),
        finished_at__lt=now - timedelta(seconds=REPAIR_AFTER_SECONDS),
        status__in=Run.TERMINAL_STATUSES,
    )
    for run in recent:
        run_end_repair(run=run)
    return {"expired": len(expired), "stuck": len(stuck)}
