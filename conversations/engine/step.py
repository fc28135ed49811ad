"""A step in hand: the run under our lease, its open event log, and the two ways a step
lets go of a run (hand it to the next step, or end it). Shared by the step's parts: the
runner (conversations/engine/runner.py) and the model call (engine/model_call.py)."""

from dataclasses import dataclass
from typing import Any

from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from conversations.engine import dispatch, eventlog
from conversations.engine.lease import Lease, LeaseLost
from conversations.engine.runs import run_finish
from conversations.models import Conversation, Run


@dataclass
class Step:
    run: Run
    conversation: Conversation
    lease: Lease
    writer: eventlog.EventWriter

    def mine(self) -> QuerySet[Run]:
        return self.lease.mine()

    def cancel_requested(self) -> bool:
        return Run.objects.filter(pk=self.run.pk, cancel_requested_at__isnull=False).exists()

    def emit(self, kind: str, payload: dict[str, Any]) -> None:
        self.writer.emit(kind, **payload)


def step_hand_over(step: Step, **fields: Any) -> None:
    """Inside the storing transaction: give up the lease (writing `fields` with it), and
    once committed, queue the next step (any worker may take it)."""
    if not step.lease.update(
        lease_token=None, lease_expires_at=None, updated_at=timezone.now(), **fields
    ):
        raise LeaseLost
    for name, value in fields.items():
        setattr(step.run, name, value)
    run_id = str(step.run.id)
    transaction.on_commit(lambda: dispatch.step_enqueue(run_id))


def step_finish(
    step: Step, status: str, error: dict[str, str] | None = None, **fields: Any
) -> None:
    """Close the run through the one ending path (writing `fields` with it), on the
    condition that our lease still holds it, its terminal event following our own events
    in the log."""
    if not run_finish(
        run=step.run, status=status, error=error, lease=step.lease, writer=step.writer, **fields
    ):
        raise LeaseLost
