"""Starting, cancelling and ending runs: the one place a run begins and the one place it
ends.

Every path that ends a run (the runner's last step, a stop, a stop before any worker took
the run, a deleted conversation, the watchdog's repair) goes through `run_finish` or
`run_end_publish`, so the order of what follows is the same everywhere: after commit,
first the run's terminal event (readers of the log are waiting on it), then the
conversation notification (other tabs stay in sync; they may also read the log).
"""

import logging
import uuid
from collections.abc import Callable
from typing import Any
from uuid import UUID

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, IntegrityError, transaction
from django.db.models import QuerySet
from django.dispatch import receiver
from django.utils import timezone

from accounts.models import User
from conversations import metrics, notifications, validation
from conversations.engine import dispatch, eventlog
from conversations.engine.cancel import cancel_flag_raise
from conversations.engine.lease import Lease
from conversations.errors import Problem, RunActive, ValidationFailed
from conversations.event_types import terminal_type
from conversations.models import Branch, Conversation, Message, Run
from conversations.serializers import run_payload
from conversations.services import conversation_create
from conversations.services.common import raise_if
from conversations.services.messages import content_checked, user_message_store
from conversations.services.runs import conversation_lock_for_run, runs_ended

log = logging.getLogger(__name__)

CLIENT_ID_MAX = 100


def run_start(
    *,
    conversation: Conversation,
    content: str,
    client_id: str = "",
    branch_id: UUID | None = None,
    attachments: Any = None,
) -> tuple[Message, Run]:
    """Store the user's message (on `branch_id`, or the active branch) and a queued run for
    it in one transaction, then (after commit) announce the run and hand it to a worker.

    `client_id` makes the call idempotent: a repeat with the same id returns the run the
    first call started. Raises RunActive while another run of this conversation is active:
    nothing is stored then. `attachments`: ids of the owner's files the message carries.
    The conversation's counters, title, draft and model are read
    again under its lock, so `conversation` may be a copy read long before (a socket's).
    """

    def store(locked: Conversation, run_id: UUID) -> tuple[Branch, Message, Message | None]:
        content_checked(content, attachments=attachments)
        message = user_message_store(
            conversation=conversation,
            locked=locked,
            content=content,
            branch_id=branch_id,
            run_id=run_id,
            attachments=attachments,
        )
        return Branch(pk=message.branch_id), message, message

    _, message, run = run_begin(conversation=conversation, client_id=client_id, prepare=store)
    assert message is not None
    return message, run


# What a run's start stores before the run itself: given the conversation's locked row and
# the new run's id, the branch the run goes on, the user message it answers and the user
# message it stored (None for a regeneration, which stores none).
Prepare = Callable[[Conversation, UUID], tuple[Branch, Message, Message | None]]


def run_begin(
    *, conversation: Conversation, client_id: str, prepare: Prepare
) -> tuple[Branch, Message | None, Run]:
    """Start a run in one transaction with the writes `prepare` makes, then announce it
    after commit. Returns the branch, the message `prepare` stored and the run.
    Idempotent by `client_id`; RunActive while another run is active.

    The cost is the point (it is paid on every message sent): one statement locks the
    conversation and answers both checks; the user message is inserted already pointing
    at the run (its id is made here), so nothing is updated afterwards; and what the
    other tabs hear of it all (the message, the title or branch it changed, the run)
    leaves as one channel-layer message."""
    if not isinstance(client_id, str) or len(client_id) > CLIENT_ID_MAX:
        raise ValidationFailed(
            [Problem("$.client_id", f"must be a string of at most {CLIENT_ID_MAX} characters")]
        )
    # Stored with the run and looked up: the same rule as every other stored text.
    raise_if(validation.text_problems(client_id, path="$.client_id", max_chars=CLIENT_ID_MAX))
    started: list[tuple[Run, dict[str, Any]]] = []
    try:
        with transaction.atomic(), notifications.batched():
            lock = conversation_lock_for_run(conversation=conversation, client_id=client_id)
            if lock.client_id_taken:
                earlier = _run_for_client_id(conversation=conversation, client_id=client_id)
                if earlier is not None:
                    return earlier
            if lock.run_active:
                raise RunActive()
            locked = lock.locked
            # Registered before anything else that runs after commit: a worker waits for
            # this one, while the notifications only keep other tabs in sync.
            transaction.on_commit(lambda: _run_announce(*started[0]))
            run_id = uuid.uuid4()
            branch, trigger, stored = prepare(locked, run_id)
            run = Run.objects.create(
                id=run_id,
                conversation=conversation,
                branch_id=branch.pk,
                trigger_message=trigger,
                model=locked.model or settings.PARLEY_MODEL,
                client_id=client_id,
            )
            payload = run_payload(run)  # once, for the event log and the notification
            started.append((run, payload))
            transaction.on_commit(metrics.run_started)  # counted only if it is stored
            if stored is not None:
                stored.run = run
            notifications.notify(conversation.pk, notifications.RUN_STARTED, run=payload)
    except IntegrityError as exc:
        # Two starts raced past the checks; the constraints decided which one won.
        if client_id:
            earlier = _run_for_client_id(conversation=conversation, client_id=client_id)
            if earlier is not None:
                return earlier
        if Run.objects.filter(conversation=conversation, status__in=Run.ACTIVE_STATUSES).exists():
            raise RunActive() from exc
        raise
    return branch, stored, run


def chat_start(
    *, user: User, message: str, conversation_id: UUID | str | None = None
) -> tuple[Conversation, Message, Run]:
    """Start a run for `message`: in the user's conversation `conversation_id`, or in a new
    conversation when it is None (its title comes from the message). The model then sees
    the conversation's whole stored history, as for any turn.

    All or nothing: a refused message leaves no empty conversation behind. Raises
    Conversation.DoesNotExist for an id that is not the user's, RunActive while a run of
    the conversation is active.
    """
    raise_if(validation.content_problems(message, path="$.message"))
    if not message.strip():
        raise ValidationFailed([Problem("$.message", "must not be empty")])
    if conversation_id is not None:
        try:
            key = UUID(str(conversation_id))
        except ValueError:
            raise Conversation.DoesNotExist from None
        # Read by the start itself, under its lock, which also checks the owner: a
        # statement less than reading it first. Its other fields load if asked for.
        conversation = Conversation.from_db(DEFAULT_DB_ALIAS, ("id", "owner_id"), (key, user.pk))
        stored, run = run_start(conversation=conversation, content=message)
        return conversation, stored, run
    with transaction.atomic():
        conversation = conversation_create(owner=user)
        stored, run = run_start(conversation=conversation, content=message)
    return conversation, stored, run


def _run_for_client_id(
    *, conversation: Conversation, client_id: str
) -> tuple[Branch, Message | None, Run] | None:
    run = (
        Run.objects.filter(conversation=conversation, client_id=client_id)
        .select_related("trigger_message", "branch")
        .first()
    )
    if run is None or run.trigger_message is None:
        return None
    # A regeneration answers a message an earlier run stored: it stored none itself.
    trigger = run.trigger_message if run.trigger_message.run_id == run.pk else None
    return run.branch or Branch(pk=run.branch_id), trigger, run


def _run_announce(run: Run, payload: dict[str, Any]) -> None:
    # A fresh writer, not open(): the run was just created, so its log starts at 0.
    eventlog.EventWriter(str(run.id)).emit(eventlog.RUN_CREATED, run=payload)
    dispatch.step_enqueue(str(run.id))


def run_cancel(*, run: Run) -> Run:
    """Ask a run to stop. A queued run no worker holds ends at once; a running one is
    stopped by its worker at the next stream chunk or between tools (cooperative)."""
    now = timezone.now()
    with transaction.atomic():
        unclaimed = Run.objects.filter(
            pk=run.pk, status=Run.Status.QUEUED, lease_expires_at__isnull=True
        )
        ended = run_finish(
            run=run, status=Run.Status.CANCELLED, only=unclaimed, cancel_requested_at=now
        )
        if not ended:
            asked = Run.objects.filter(
                pk=run.pk, status__in=Run.ACTIVE_STATUSES, cancel_requested_at__isnull=True
            ).update(cancel_requested_at=now, updated_at=now)
            if asked:
                run_id = str(run.pk)
                transaction.on_commit(lambda: cancel_flag_raise(run_id=run_id))
        run.refresh_from_db()
    return run


def run_finish(
    *,
    run: Run,
    status: str,
    error: dict[str, str] | None = None,
    only: QuerySet[Run] | None = None,
    lease: Lease | None = None,
    writer: eventlog.EventWriter | None = None,
    **fields: Any,
) -> bool:
    """End an active run: a compare-and-set from an active status (within `only`, such as
    the rows a worker's lease still holds, or on the condition that `lease` still holds
    it), then `run_end_publish` after commit. Returns False, changing nothing, when the
    run was no longer there to end.

    `writer` is the run's open log writer when the caller holds one (a worker), so the
    terminal event follows its own events; without it the event is appended to the log
    unless the log already ended."""
    if status not in Run.TERMINAL_STATUSES:
        raise ValueError(f"not a terminal status: {status!r}")
    now = timezone.now()
    values: dict[str, Any] = {
        "status": status,
        "error": error,
        "finished_at": now,
        "updated_at": now,
        "lease_expires_at": None,
        "lease_token": None,
        **fields,
    }
    if lease is not None:
        # Every step ends this way: on the condition that its lease still holds the run.
        ended = lease.end(**values)
    else:
        rows = only if only is not None else Run.objects.filter(pk=run.pk)
        ended = bool(rows.filter(status__in=Run.ACTIVE_STATUSES).update(**values))
    if not ended:
        return False
    for name, value in values.items():
        setattr(run, name, value)
    run_end_publish(run=run, writer=writer)
    return True


def run_end_publish(
    *, run: Run, writer: eventlog.EventWriter | None = None, notify: bool = True
) -> None:
    """Inside the ending transaction: once it commits, the run's terminal event, then the
    conversation's `run_ended` notification (left out for a conversation being deleted)."""
    payload = run_payload(run)
    event_type = terminal_type(run.status)
    run_id = str(run.pk)

    def publish() -> None:
        if writer is not None:
            writer.emit(event_type, run=payload)
            return
        try:
            eventlog.event_log_ensure_terminal(run_id, {"type": event_type, "run": payload})
        except Exception:
            # The watchdog's repair adds it later; the run itself has ended all the same.
            log.warning("run %s: could not end its event log", run_id, exc_info=True)

    transaction.on_commit(publish)  # registered first, so it is sent first
    status, started, ended = run.status, run.created_at, run.finished_at
    transaction.on_commit(lambda: metrics.run_ended(status, started=started, ended=ended))
    if notify:
        notifications.notify(run.conversation_id, notifications.RUN_ENDED, run=payload)


def run_end_repair(*, run: Run) -> bool:
    """For a run that ended a while ago (the watchdog's sweep): if its log never got its
    terminal event (the worker died between the commit and publishing), append it, then
    send the notification that was lost with it. True when it repaired."""
    payload = run_payload(run)
    if not eventlog.event_log_ensure_terminal(
        str(run.pk), {"type": terminal_type(run.status), "run": payload}
    ):
        return False
    notifications.notify(run.conversation_id, notifications.RUN_ENDED, run=payload)
    return True


@receiver(runs_ended, dispatch_uid="engine-runs-ended")
def _runs_ended_with_their_conversations(sender: Any, runs: list[Run], **kwargs: Any) -> None:
    # Their conversations are being deleted: whoever follows one of these runs (SSE,
    # another socket, `POST chat/`) finishes instead of waiting for a worker that will
    # find nothing to do. The rows go with the conversation, so nothing is updated here.
    for run in runs:
        run_end_publish(run=run, notify=False)
