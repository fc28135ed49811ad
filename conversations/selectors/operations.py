"""Reads for the operators' numbers (/metrics): counts across every user, nothing else."""

from django.db.models import Count

from conversations.models import Run


def runs_active_counts() -> dict[str, int]:
    """Runs waiting for a worker (`queued`) and being worked on (`in_progress`), by status;
    zero included, so a status that empties still reports."""
    counts = {str(status): 0 for status in Run.ACTIVE_STATUSES}
    rows = (
        Run.objects.filter(status__in=Run.ACTIVE_STATUSES)
        .values_list("status")
        .annotate(runs=Count("id"))
        .order_by()
    )
    for status, runs in rows:
        counts[str(status)] = runs
    return counts
