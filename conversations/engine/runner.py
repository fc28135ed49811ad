"""One step of the tool loop. A Celery task runs one step (conversations/tasks.py).

A step is either one streamed model call or the pending tool calls of the run's last
assistant message. It works out which from the stored messages alone, so any worker can
take over a run at any point:

1. take the run's lease with a conditional UPDATE (no lease, no work);
2. assistant tool calls without stored results → run just those tools (a stored tool
   message for a call id means that call is done: tools are never run twice);
   otherwise → call the model;
3. store the result in one transaction that also checks the lease is still ours, then
   (after commit) publish the events and enqueue the next step.

A step renews its lease while it waits on the model or a tool (conversations/engine/lease.py):
a tool slower than the lease is not started again by another worker meanwhile. A stop
request ends a streaming reply at its next chunk (conversations/engine/streaming.py), and is
otherwise seen between tools.

A killed worker loses at most the step in flight: its lease expires, the watchdog hands
the run to another worker, and that step runs again (`attempt` counts the tries and
fails the run past PARLEY_RUN_MAX_ATTEMPTS instead of looping). A retried model step
re-announces the same message id (`message.created`), so readers restart that message's
text; a stopped (cancelled) reply keeps its partial text, stored with
`provider_payload.finish_reason = "cancelled"`, while a failed one is discarded.
"""

import logging
import uuid
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import F, Q, QuerySet
from django.utils import timezone

from config.log_context import exception_for_log, log_ids_bind, log_ids_scoped
from conversations import metrics, selectors
from conversations.engine import dispatch, eventlog, streaming
from conversations.engine.cancel import cancel_flag_raised
from conversations.engine.lease import Lease, LeaseLost, release_connection
from conversations.engine.llm import provider_get
from conversations.engine.llm.base import GenerationSettings
from conversations.engine.model_input_log import model_input_log
from conversations.engine.run_errors import attempts_error, cut_short_error
from conversations.engine.runs import run_finish
from conversations.engine.turns import turns
from conversations.models import Conversation, Message, Run
from conversations.serializers import run_payload
from conversations.services.messages import NewMessage, message_append, stored_payload
from conversations.tools import ToolContext, tool_definitions, tool_execute

log = logging.getLogger(__name__)

# How often a streaming step's thread wakes to renew its lease and look for the stop flag
# (a Redis read, see engine/cancel.py): the streaming loop stops a reply at once on the stop
# broadcast, and this check finds within a second a stop the broadcast missed; 50
# streaming runs cost 50 reads a second, not one per chunk.
CANCEL_CHECK_SECONDS = 1.0


@dataclass
class Step:
    run: Run
    conversation: Conversation
    lease: Lease
    writer: eventlog.EventWriter

    def mine(self) -> QuerySet[Run]:
        return self.lease.mine()

    def keepalive(self) -> bool:
        """While streaming (about once a second): renew the lease when a third of it is
        used, and say whether a stop was asked. Holds no database connection in between
        (see release_connection)."""
        if self.lease.renew_when_due():
            cancelled = self.cancel_requested()
            release_connection()
            if cancelled:
                return True
        return cancel_flag_raised(run_id=str(self.run.pk))

    def cancel_requested(self) -> bool:
        return Run.objects.filter(pk=self.run.pk, cancel_requested_at__isnull=False).exists()

    def emit(self, kind: str, payload: dict[str, Any]) -> None:
        self.writer.emit(kind, **payload)


# --- entry points ----------------------------------------------------------------------


@log_ids_scoped  # the ids bound below name this step's lines, and none after it
def run_step(run_id: str) -> None:
    log_ids_bind(run_id=run_id)
    # A thread waits for its turn holding no pooled database connection: the threads that
    # have turns need them, and twenty waiters would take the whole pool.
    release_connection()
    with turns.taken(urgent=True):
        step = _lease(run_id)
    if step is None:
        return
    release_connection()
    try:
        with turns.taken():
            _advance(step)
    except LeaseLost:
        log.warning("run %s: lease lost, leaving the run to its new owner", run_id)
    except Exception as error:
        # Unknown trouble (database hiccup, a bug): give the lease back so the run is
        # retried soon; the attempt cap turns a persistent failure into a failed run.
        log.error("run %s: step crashed", run_id, exc_info=exception_for_log(error))
        step.mine().update(lease_expires_at=timezone.now(), lease_token=None)
        dispatch.step_enqueue(run_id, countdown=min(2**step.run.attempt, 30))


# --- lease ---------------------------------------------------------------------------


def _lease(run_id: str) -> Step | None:
    now = timezone.now()
    current = Run.objects.filter(pk=run_id).values_list("status", flat=True).first()
    if current not in Run.ACTIVE_STATUSES:
        return None
    token = uuid.uuid4()
    taken = (
        Run.objects.filter(pk=run_id, status=current)
        .filter(Q(lease_expires_at__isnull=True) | Q(lease_expires_at__lt=now))
        .update(
            status=Run.Status.IN_PROGRESS,
            lease_token=token,
            lease_expires_at=now + timedelta(seconds=settings.PARLEY_RUN_LEASE_SECONDS),
            attempt=F("attempt") + 1,
            started_at=now if current == Run.Status.QUEUED else F("started_at"),
            updated_at=now,
        )
    )
    if not taken:
        return None
    run = Run.objects.select_related("conversation__owner").get(pk=run_id)
    log_ids_bind(conversation_id=run.conversation_id, user_id=run.conversation.owner_id)
    writer = eventlog.EventWriter.open(run_id)
    if writer.next_sequence == 0:
        # The web process committed the run but never announced it.
        writer.emit(eventlog.RUN_CREATED, run=run_payload(run))
    if current == Run.Status.QUEUED:
        writer.emit(eventlog.RUN_IN_PROGRESS, run=run_payload(run))
    lease = Lease(run_id=run.pk, token=token)
    return Step(run=run, conversation=run.conversation, lease=lease, writer=writer)


# --- the step ------------------------------------------------------------------------


def _advance(step: Step) -> None:
    run = step.run
    if run.attempt > settings.PARLEY_RUN_MAX_ATTEMPTS:
        _finish(
            step, Run.Status.FAILED, error=attempts_error("attempts_exhausted", run.attempt - 1)
        )
        return
    if step.cancel_requested():
        _finish(step, Run.Status.CANCELLED)
        return
    assistant = (
        Message.objects.filter(run=run, role=Message.Role.ASSISTANT).order_by("-seq").first()
    )
    if assistant is not None and assistant.tool_calls:
        answered = set(
            Message.objects.filter(
                run=run, role=Message.Role.TOOL, seq__gt=assistant.seq
            ).values_list("tool_call_id", flat=True)
        )
        pending = [call for call in assistant.tool_calls if call["id"] not in answered]
        if pending:
            _run_tools(step, pending)
            return
    elif assistant is not None:
        # The reply was stored but the run not closed: nothing left to do.
        _finish(step, Run.Status.COMPLETED)
        return
    if run.iterations >= settings.PARLEY_RUN_MAX_ITERATIONS:
        message = (
            f"Parley stopped after {run.iterations} rounds of tool calls in one reply, "
            "the most one reply may take."
        )
        _finish(step, Run.Status.INCOMPLETE, error={"code": "max_iterations", "message": message})
        return
    _call_model(step)


def _call_model(step: Step) -> None:
    run, conversation = step.run, step.conversation
    conversation.refresh_from_db()
    # Read with the draft the model is about to see: the user's edits up to here are ones
    # the model knows of; any later edit wins over the update_draft this reply may ask for.
    edits_seen = conversation.draft_edit_count
    # The same id on every attempt of this step: a retry restarts the same message.
    message_id = uuid.uuid5(run.id, f"assistant-{run.iterations + 1}")
    branch = selectors.branch_get(conversation=conversation, branch_id=run.branch_id)
    model_input = selectors.conversation_model_input(conversation=conversation, branch=branch)
    tools = tool_definitions(conversation.tools)
    generation = GenerationSettings.effective(
        temperature=conversation.temperature, max_output_tokens=conversation.max_output_tokens
    )
    model_input_log(f"run {run.id}", model=run.model, messages=model_input, generation=generation)
    step.writer.emit(
        eventlog.MESSAGE_CREATED, message_id=str(message_id), role="assistant", attempt=run.attempt
    )
    replies = Message.objects.filter(run=run, role=Message.Role.ASSISTANT).exclude(content="")
    if run.iterations == 0 or not replies.exists():
        # No words yet (a first call may only ask for tools): these end the user's wait.
        step.writer.first_token_since = run.created_at.timestamp()

    release_connection()
    stream = streaming.ReplyStream(
        provider=provider_get(),
        model=run.model,
        messages=model_input,
        tools=tools,
        writer=step.writer,
        message_id=str(message_id),
        generation=generation,
    ).start()
    with turns.given_back():
        try:
            while (result := stream.wait(timeout=max(CANCEL_CHECK_SECONDS, 0.05))) is None:
                if step.keepalive():
                    stream.stop()
        except BaseException:
            # Lease lost or a crash: stop reading, and write nothing more to a log that
            # may have a new owner.
            stream.stop(discard=True)
            raise
    if result.error is not None:
        error = result.error
        metrics.provider_error(error.code)
        _finish(step, Run.Status.FAILED, error={"code": error.code, "message": error.message})
        return
    reply, cancelled = result.reply, result.stopped
    # The reply reached its token limit: what it said is kept, but a tool call it was
    # writing may be cut mid-arguments, so none is run, and the run ends incomplete.
    cut_short = not cancelled and reply.finish_reason == "length"

    tool_calls = [] if cancelled or cut_short else reply.tool_calls
    for call in tool_calls:
        step.writer.emit(
            eventlog.TOOL_CALL_COMPLETED,
            call_id=call["id"],
            name=call["name"],
            arguments=call["arguments"],
        )
    with transaction.atomic():
        _count_iteration(step, reply.usage, edits_seen=edits_seen)
        stored = None
        # A reply stopped (or cut at its token limit) while the model was still thinking
        # is kept too: the user watched those thoughts, and a reload must not lose them.
        if reply.text or tool_calls or reply.reasoning:
            stored = message_append(
                conversation=conversation,
                branch_id=branch.pk,
                message=NewMessage(
                    id=message_id,
                    role=Message.Role.ASSISTANT,
                    content=reply.text,
                    tool_calls=tool_calls,
                    run_id=run.id,
                    usage=reply.usage,
                    # The server's own fields with the reply (system_fingerprint, timings,
                    # ...), and why it ended.
                    provider_payload=reply.provider_payload(
                        "cancelled" if cancelled else reply.finish_reason
                    ),
                    reasoning=reply.reasoning,
                    reasoning_ms=reply.reasoning_ms,
                ),
            )
        if stored is not None:
            transaction.on_commit(
                lambda: step.emit(
                    eventlog.MESSAGE_COMPLETED,
                    {
                        "message": stored_payload(
                            stored, branch, branch_count=conversation.branch_count
                        )
                    },
                )
            )
        if cancelled:
            _finish(step, Run.Status.CANCELLED)
        elif cut_short:
            _finish(
                step, Run.Status.INCOMPLETE, error=cut_short_error(generation.max_output_tokens)
            )
        elif not tool_calls:
            _finish(step, Run.Status.COMPLETED)
        else:
            _hand_over(step)


def _count_iteration(step: Step, usage: dict[str, Any] | None, *, edits_seen: int) -> None:
    """Inside the storing transaction: one more model call, its usage added to the run's,
    the user's draft edits it saw (stored with the tool calls it asked for, so the tools
    step knows), and a proof that the lease is still ours (else everything rolls back)."""
    run = step.run
    totals = dict(run.usage or {})
    for key, value in (usage or {}).items():
        if isinstance(value, int) and not isinstance(value, bool):
            totals[key] = totals.get(key, 0) + value
    if not step.mine().update(
        iterations=F("iterations") + 1,
        usage=totals,
        draft_edits_seen=edits_seen,
        attempt=0,
        lease_expires_at=step.lease.until(),
        updated_at=timezone.now(),
    ):
        raise LeaseLost
    run.iterations += 1
    run.usage = totals
    run.draft_edits_seen = edits_seen
    run.attempt = 0


def _run_tools(step: Step, pending: list[dict[str, str]]) -> None:
    run, conversation = step.run, step.conversation
    for call in pending:
        if step.cancel_requested():
            _finish(step, Run.Status.CANCELLED)
            return
        step.lease.renew()
        context = ToolContext(
            call_id=call["id"],
            # An earlier attempt of this step may have started this call before dying.
            is_resume=run.attempt > 1,
            conversation=conversation,
            user=conversation.owner,
            emit=step.emit,
            # Stored with the tool calls by the model step that asked for them.
            draft_edits_seen=run.draft_edits_seen,
        )
        with turns.given_back():
            release_connection()  # the tool may run for long; renewals reconnect
            result = tool_execute(
                name=call["name"],
                arguments=call["arguments"],
                context=context,
                enabled=conversation.tools,
                keepalive=step.lease.keepalive,
                keepalive_every=Lease.period(),
            )
            release_connection()  # before waiting for the turn again
        # Each result is stored as soon as it exists: a crash after it never reruns it.
        with transaction.atomic():
            if not step.mine().update(lease_expires_at=step.lease.until()):
                raise LeaseLost
            stored = message_append(
                conversation=conversation,
                branch_id=run.branch_id,
                message=NewMessage(
                    role=Message.Role.TOOL,
                    content=result.output,
                    tool_call_id=call["id"],
                    name=call["name"],
                    run_id=run.id,
                    provider_payload={"is_error": True} if result.is_error else None,
                ),
            )
        step.emit(
            eventlog.TOOL_RESULT_COMPLETED,
            {"call_id": call["id"], "output": stored.content, "is_error": result.is_error},
        )
    with transaction.atomic():
        if not step.mine().update(attempt=0):
            raise LeaseLost
        _hand_over(step)


def _hand_over(step: Step) -> None:
    """Inside the storing transaction: give up the lease, and once committed, queue the
    next step (any worker may take it)."""
    if not step.mine().update(lease_token=None, lease_expires_at=None, updated_at=timezone.now()):
        raise LeaseLost
    run_id = str(step.run.id)
    transaction.on_commit(lambda: dispatch.step_enqueue(run_id))


def _finish(step: Step, status: str, error: dict[str, str] | None = None) -> None:
    """Close the run through the one ending path, on the condition that our lease still
    holds it, its terminal event following our own events in the log."""
    if not run_finish(
        run=step.run, status=status, error=error, only=step.mine(), writer=step.writer
    ):
        raise LeaseLost
