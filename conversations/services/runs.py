"""Starting and cancelling runs. The tool loop itself lives in conversations/runner.py."""

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from conversations.errors import Conflict
from conversations.models import Conversation, Message, Run
from conversations.services.messages import user_message_append

RUN_ACTIVE_MESSAGE = (
    "A reply is still being generated in this conversation; wait for it or cancel it."
)


def run_start(*, conversation: Conversation, content: str) -> tuple[Message, Run]:
    """Store the user's message and a queued run for it in one transaction, then (after
    commit) announce the run and hand it to a worker. Raises Conflict while another run
    of this conversation is active: nothing is stored then."""
    try:
        with transaction.atomic():
            if Run.objects.filter(
                conversation=conversation, status__in=Run.ACTIVE_STATUSES
            ).exists():
                raise Conflict(RUN_ACTIVE_MESSAGE)
            message = user_message_append(conversation=conversation, content=content)
            run = Run.objects.create(
                conversation=conversation,
                trigger_message=message,
                model=conversation.model or settings.PARLEY_MODEL,
            )
            Message.objects.filter(pk=message.pk).update(run=run)
            message.run = run
    except IntegrityError as exc:
        # Two starts raced past the check: the one-active-run constraint decided.
        if Run.objects.filter(conversation=conversation, status__in=Run.ACTIVE_STATUSES).exists():
            raise Conflict(RUN_ACTIVE_MESSAGE) from exc
        raise
    transaction.on_commit(lambda: _run_announce(run))
    return message, run


def _run_announce(run: Run) -> None:
    from conversations import events, payloads
    from conversations.tasks import run_step

    events.EventWriter.open(str(run.id)).emit("run.created", run=payloads.run_payload(run))
    run_step.delay(str(run.id))


def run_cancel(*, run: Run) -> Run:
    """Ask a run to stop. A queued run no worker holds ends at once; a running one is
    stopped by its worker at the next stream chunk or between tools (cooperative)."""
    now = timezone.now()
    with transaction.atomic():
        ended = Run.objects.filter(
            pk=run.pk, status=Run.Status.QUEUED, lease_expires_at__isnull=True
        ).update(
            status=Run.Status.CANCELLED, cancel_requested_at=now, finished_at=now, updated_at=now
        )
        if not ended:
            Run.objects.filter(
                pk=run.pk, status__in=Run.ACTIVE_STATUSES, cancel_requested_at__isnull=True
            ).update(cancel_requested_at=now, updated_at=now)
        run.refresh_from_db()
        if ended:
            transaction.on_commit(lambda: _run_announce_end(run))
    return run


def _run_announce_end(run: Run) -> None:
    from conversations import events, payloads

    events.EventWriter.open(str(run.id)).emit(f"run.{run.status}", run=payloads.run_payload(run))
