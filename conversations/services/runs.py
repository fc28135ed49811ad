"""Starting and cancelling runs. The tool loop itself lives in conversations/runner.py."""

import logging
from collections.abc import Iterable
from uuid import UUID

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from conversations import events, notifications, validation
from conversations.cancel_flags import cancel_flag_raise
from conversations.errors import Conflict, Problem, ValidationFailed
from conversations.models import Conversation, Message, Run
from conversations.payloads import run_payload
from conversations.services.common import raise_if
from conversations.services.messages import user_message_append

log = logging.getLogger(__name__)

RUN_ACTIVE_MESSAGE = (
    "A reply is still being generated in this conversation; wait for it or cancel it."
)
CLIENT_ID_MAX = 100


def run_start(
    *, conversation: Conversation, content: str, client_id: str = ""
) -> tuple[Message, Run]:
    """Store the user's message and a queued run for it in one transaction, then (after
    commit) announce the run and hand it to a worker.

    `client_id` makes the call idempotent: a repeat with the same id returns the run the
    first call started. Raises Conflict while another run of this conversation is active:
    nothing is stored then.
    """
    if not isinstance(client_id, str) or len(client_id) > CLIENT_ID_MAX:
        raise ValidationFailed(
            [Problem("$.client_id", f"must be a string of at most {CLIENT_ID_MAX} characters")]
        )
    # Stored with the run and looked up: the same rule as every other stored text.
    raise_if(validation.text_problems(client_id, path="$.client_id", max_chars=CLIENT_ID_MAX))
    if client_id:
        earlier = _run_for_client_id(conversation=conversation, client_id=client_id)
        if earlier is not None:
            return earlier
    started: list[Run] = []
    try:
        with transaction.atomic():
            # Registered first, so it runs first after commit: a worker waits for this one,
            # while the notifications only keep other tabs in sync. Dropped on rollback.
            transaction.on_commit(lambda: _run_announce(started[0]))
            if Run.objects.filter(
                conversation=conversation, status__in=Run.ACTIVE_STATUSES
            ).exists():
                raise Conflict(RUN_ACTIVE_MESSAGE)
            message = user_message_append(conversation=conversation, content=content)
            run = Run.objects.create(
                conversation=conversation,
                trigger_message=message,
                model=conversation.model or settings.PARLEY_MODEL,
                client_id=client_id,
            )
            started.append(run)
            Message.objects.filter(pk=message.pk).update(run=run)
            message.run = run
            notifications.notify(conversation.pk, notifications.RUN_STARTED, run=run_payload(run))
    except IntegrityError as exc:
        # Two starts raced past the checks; the constraints decided which one won.
        if client_id:
            earlier = _run_for_client_id(conversation=conversation, client_id=client_id)
            if earlier is not None:
                return earlier
        if Run.objects.filter(conversation=conversation, status__in=Run.ACTIVE_STATUSES).exists():
            raise Conflict(RUN_ACTIVE_MESSAGE) from exc
        raise
    return message, run


def _run_for_client_id(*, conversation: Conversation, client_id: str) -> tuple[Message, Run] | None:
    run = (
        Run.objects.filter(conversation=conversation, client_id=client_id)
        .select_related("trigger_message")
        .first()
    )
    if run is None or run.trigger_message is None:
        return None
    return run.trigger_message, run


def _run_announce(run: Run) -> None:
    # Imported here: the task module imports the runner, which imports the services.
    from conversations.tasks import run_step

    # A fresh writer, not open(): the run was just created, so its log starts at 0.
    events.EventWriter(str(run.id)).emit(events.RUN_CREATED, run=run_payload(run))
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
            asked = Run.objects.filter(
                pk=run.pk, status__in=Run.ACTIVE_STATUSES, cancel_requested_at__isnull=True
            ).update(cancel_requested_at=now, updated_at=now)
            if asked:
                run_id = str(run.pk)
                transaction.on_commit(lambda: cancel_flag_raise(run_id=run_id))
        run.refresh_from_db()
        if ended:
            run_ended_announce(run)
    return run


def run_ended_announce(run: Run) -> None:
    """After commit: the run's terminal event and the conversation notification."""
    payload = run_payload(run)
    notifications.notify(run.conversation_id, notifications.RUN_ENDED, run=payload)
    transaction.on_commit(
        lambda: events.EventWriter.open(str(run.id)).emit(f"run.{run.status}", run=payload)
    )


def runs_end_with_conversations(*, conversation_ids: Iterable[UUID]) -> None:
    """Inside a transaction that deletes these conversations: once it commits, each run
    that was still active gets its terminal event (`run.cancelled`), so whoever follows
    it (SSE, another socket, `POST chat/`) finishes instead of waiting for a worker that
    will find nothing to do. Its worker stops at its next lease renewal."""
    now = timezone.now()
    ended = []
    for run in Run.objects.filter(
        conversation_id__in=list(conversation_ids), status__in=Run.ACTIVE_STATUSES
    ):
        run.status = Run.Status.CANCELLED
        run.finished_at = run.cancel_requested_at = now
        ended.append((str(run.pk), run_payload(run)))

    def announce() -> None:
        for run_id, payload in ended:
            try:
                events.event_log_ensure_terminal(run_id, {"type": "run.cancelled", "run": payload})
            except Exception:
                log.warning("run %s: could not end its event log", run_id, exc_info=True)

    if ended:
        transaction.on_commit(announce)
