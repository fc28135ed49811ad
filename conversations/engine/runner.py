"""One step of a stored run's loop. A Celery task runs one step (conversations/tasks.py);
what a step decides and does is the one loop's (engine/loop.py), this module drives it.

A step is either one streamed model call or the pending tool calls of the run's last
assistant message. It works out which from the stored messages alone, so any worker can
take over a run at any point:

1. take the run's lease with a conditional UPDATE (no lease, no work);
2. assistant tool calls without stored results → run just those tools (a stored tool
   message for a call id means that call is done: tools are never run twice);
   otherwise → call the model;
3. store the result in one transaction that also checks the lease is still ours, then
   (after commit) publish the events and enqueue the next step.

A model call holds no worker thread while its reply streams: the step's task ends once
the stream is handed to the process's streaming loop, and the result is stored from a
store thread when it ends (engine/model_call.py, engine/inflight.py). A step renews its
lease while it waits on the model (all of the process's streaming replies together) or a
tool (conversations/engine/lease.py): a tool slower than the lease is not started again
by another worker meanwhile. A stop request ends a streaming reply at its next chunk
(conversations/engine/streaming.py) and a tool call within a second (its flag looked
for while the tool runs); it is also seen between tools and at each step.

A killed worker loses at most the step in flight: its lease expires, the watchdog hands
the run to another worker, and that step runs again (`attempt` counts the tries and
fails the run past PARLEY_RUN_MAX_ATTEMPTS instead of looping). A retried model step
re-announces the same message id (`message.created`), so readers restart that message's
text; a stopped (cancelled) reply keeps its partial text, stored with
`provider_payload.finish_reason = "cancelled"`, while a failed one is discarded.
"""

import concurrent.futures
import logging
from collections.abc import Callable

from django.conf import settings
from django.db.models import F
from django.utils import timezone

from config.log_context import exception_for_log, log_ids_bind, log_ids_scoped
from conversations.engine import dispatch, eventlog
from conversations.engine.inflight import ReplyAbandoned
from conversations.engine.lease import LeaseLost, lease_take, release_connection
from conversations.engine.llm import provider_get
from conversations.engine.loop import End, RunTools, loop_next, tools_run
from conversations.engine.model_call import model_call_start
from conversations.engine.run_errors import attempts_error
from conversations.engine.step import Step, step_finish
from conversations.engine.turns import turns
from conversations.models import Run
from conversations.serializers import run_payload

log = logging.getLogger(__name__)

# --- entry points ----------------------------------------------------------------------


@log_ids_scoped  # the ids bound below name this step's lines, and none after it
def run_step(run_id: str) -> concurrent.futures.Future[None] | None:
    """Take one step of the run. A model call returns once its reply streams, with a
    future that resolves when the reply is stored; other steps return None when done."""
    log_ids_bind(run_id=run_id)
    # A thread waits for its turn holding no pooled database connection: the threads that
    # have turns need them, and twenty waiters would take the whole pool.
    release_connection()
    streaming: list[concurrent.futures.Future[None]] = []
    with turns.taken(urgent=True):
        step = _lease(run_id)
        if step is None:
            return None
        # Leases go first: while other threads wait for a turn, this step waits for its
        # next one like any (and without its connection); while none does, it goes on.
        turns.requeue(before=release_connection)
        _step_guard(step, lambda: streaming.extend(_advance(step)))
    release_connection()
    return streaming[0] if streaming else None


def _step_guard(step: Step, work: Callable[[], None]) -> None:
    """Do a part of the step, answering its trouble: a lost lease leaves the run to its
    new owner; anything else gives the lease back so the run is retried soon."""
    run_id = str(step.run.id)
    try:
        work()
    except LeaseLost:
        log.warning("run %s: lease lost, leaving the run to its new owner", run_id)
    except ReplyAbandoned:
        # The worker is shutting down: not the run's fault, so the try is not counted,
        # and the next worker takes the run at once.
        log.info("run %s: reply stopped by the worker's shutdown, queued again", run_id)
        step.mine().update(
            lease_expires_at=timezone.now(), lease_token=None, attempt=F("attempt") - 1
        )
        dispatch.step_enqueue(run_id)
    except Exception as error:
        # Unknown trouble (database hiccup, a bug): give the lease back so the run is
        # retried soon; the attempt cap turns a persistent failure into a failed run.
        log.error("run %s: step crashed", run_id, exc_info=exception_for_log(error))
        step.mine().update(lease_expires_at=timezone.now(), lease_token=None)
        dispatch.step_enqueue(run_id, countdown=min(2**step.run.attempt, 30))


# --- lease ---------------------------------------------------------------------------


def _lease(run_id: str) -> Step | None:
    """Take the run's lease (one statement on PostgreSQL, which also reads all the step
    needs to begin), then open its event log."""
    taken = lease_take(run_id)
    if taken is None:
        return None
    run = taken.run
    log_ids_bind(conversation_id=run.conversation_id, user_id=run.conversation.owner_id)
    writer = _log_open(run, started=taken.started)
    return Step(run=run, conversation=run.conversation, lease=taken.lease, writer=writer)


def _log_open(run: Run, *, started: bool) -> eventlog.EventWriter:
    """The run's log, continued, with `run.in_progress` when this step `started` the run."""
    run_id = str(run.pk)
    payload = run_payload(run)
    if started:
        # The web process announced the run (`run.created`, sequence 0) before queueing
        # it, so the log holds just that: no read needed to go on after it.
        writer = eventlog.EventWriter(run_id, next_sequence=1)
        if writer.emit_second(eventlog.RUN_IN_PROGRESS, run=payload):
            return writer
    writer = eventlog.EventWriter.open(run_id)
    if writer.next_sequence == 0:
        # The web process committed the run but never announced it.
        writer.emit(eventlog.RUN_CREATED, run=payload)
    if started:
        writer.emit(eventlog.RUN_IN_PROGRESS, run=payload)
    return writer


# --- the step ------------------------------------------------------------------------


def _advance(step: Step) -> list[concurrent.futures.Future[None]]:
    """The step's work; a model call's streaming reply, when it made one."""
    run = step.run
    if run.attempt > settings.PARLEY_RUN_MAX_ATTEMPTS:
        step_finish(
            step, Run.Status.FAILED, error=attempts_error("attempts_exhausted", run.attempt - 1)
        )
        return []
    if run.cancel_requested_at is not None:  # read with the lease, just now
        step_finish(step, Run.Status.CANCELLED)
        return []
    action = loop_next(run, step.replied())
    if isinstance(action, End):
        step_finish(step, action.status, error=action.error)
        return []
    if isinstance(action, RunTools):
        tools_run(step, action.calls)
        return []
    return [model_call_start(step, provider=provider_get(), guard=_step_guard)]
