"""Runs ended by a deletion. Starting, stopping and ending runs otherwise belongs to the
engine (conversations/engine/runs.py), which also publishes what these end."""

from collections.abc import Iterable
from uuid import UUID

from django.dispatch import Signal
from django.utils import timezone

from conversations.models import Run

# Sent inside a deleting transaction with the runs it ends (`runs`: Run objects, already
# marked cancelled in memory). The engine connects to it to publish their terminal events
# after commit; the domain itself knows nothing of event logs.
runs_ended = Signal()


def runs_end_with_conversations(*, conversation_ids: Iterable[UUID]) -> None:
    """Inside a transaction that deletes these conversations: each run still active ends
    as cancelled with them. Its worker stops at its next lease renewal."""
    now = timezone.now()
    ended = []
    for run in Run.objects.filter(
        conversation_id__in=list(conversation_ids), status__in=Run.ACTIVE_STATUSES
    ):
        run.status = Run.Status.CANCELLED
        run.finished_at = run.cancel_requested_at = now
        ended.append(run)
    if ended:
        runs_ended.send(sender=Run, runs=ended)
