"""A model step: read the model input, stream the reply, store what it said.

The first half runs on the step's worker thread; the stream then goes to the process's
streaming loop and the thread is free (engine/inflight.py); the second half,
`_reply_store`, runs on a store thread once the stream has ended.
"""

import concurrent.futures
import uuid
from collections.abc import Callable
from typing import Any

from django.db import transaction

from conversations import context, metrics, selectors
from conversations.engine import eventlog, streaming
from conversations.engine.inflight import InFlightReply, in_flight
from conversations.engine.lease import release_connection
from conversations.engine.llm.base import GenerationSettings, Provider, usage_added
from conversations.engine.model_input_log import model_input_log
from conversations.engine.run_errors import cut_short_error
from conversations.engine.step import Step, step_finish, step_hand_over
from conversations.engine.turns import turns
from conversations.models import Branch, Message, Run
from conversations.services.messages import NewMessage, message_append, stored_payload
from conversations.tools import tool_definitions


def model_call_start(
    step: Step, *, provider: Provider, guard: Callable[[Step, Callable[[], None]], None]
) -> concurrent.futures.Future[None]:
    """Start the model call of `step`: its future resolves once the reply is stored (or
    the step's trouble handled by `guard`, the runner's step guard)."""
    run, conversation = step.run, step.conversation
    # The conversation was read with the lease, a moment ago, with the draft the model is
    # about to see: the user's edits up to here are ones the model knows of; any later
    # edit wins over the update_draft this reply may ask for.
    edits_seen = conversation.draft_edit_count
    # The same id on every attempt of this step: a retry restarts the same message.
    message_id = uuid.uuid5(run.id, f"assistant-{run.iterations + 1}")
    branch = run.branch  # read with the lease
    if branch is None or branch.conversation_id != conversation.pk:
        branch = selectors.branch_get(conversation=conversation, branch_id=run.branch_id)
    model_input = selectors.conversation_model_input(conversation=conversation, branch=branch)
    if run.instructions:
        # A response's instructions: the preamble of this run's calls, stored nowhere else.
        model_input = [context.system_message(run.instructions), *model_input]
    # The client's own function tools go with the server's; calls to them end the run.
    tools = [*tool_definitions(conversation.tools), *run.client_tools]
    generation = GenerationSettings.effective(
        temperature=conversation.temperature,
        max_output_tokens=conversation.max_output_tokens,
        overrides=run.generation,
    )
    model_input_log(f"run {run.id}", model=run.model, messages=model_input, generation=generation)
    step.writer.emit(
        eventlog.MESSAGE_CREATED, message_id=str(message_id), role="assistant", attempt=run.attempt
    )
    # Queried only after a first call (a first step has no reply to look for).
    if run.iterations == 0 or not _words_said(run):
        # No words yet (a first call may only ask for tools): these end the user's wait.
        step.writer.first_token_since = run.created_at.timestamp()
    release_connection()

    def on_end(reply: InFlightReply) -> None:
        def store() -> None:
            _reply_store(
                step,
                reply.result(),
                message_id=message_id,
                branch=branch,
                generation=generation,
                edits_seen=edits_seen,
            )

        with turns.taken():
            guard(step, store)

    stream = streaming.ReplyStream(
        provider=provider,
        model=run.model,
        messages=model_input,
        tools=tools,
        writer=step.writer,
        message_id=str(message_id),
        generation=generation,
    )
    return in_flight.start(InFlightReply(stream=stream, lease=step.lease, on_end=on_end))


def _reply_store(
    step: Step,
    result: streaming.StreamResult,
    *,
    message_id: uuid.UUID,
    branch: Branch,
    generation: GenerationSettings,
    edits_seen: int,
) -> None:
    run, conversation = step.run, step.conversation
    if result.error is not None:
        error = result.error
        metrics.provider_error(error.code)
        step_finish(step, Run.Status.FAILED, error={"code": error.code, "message": error.message})
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
        # Written with the run's next state, at the end: that update also proves the lease
        # is still ours, and rolls everything back when it is not.
        counted = _iteration_counted(step, reply.usage, edits_seen=edits_seen)
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
            step_finish(step, Run.Status.CANCELLED, **counted)
        elif cut_short:
            cut = cut_short_error(generation.max_output_tokens)
            step_finish(step, Run.Status.INCOMPLETE, error=cut, **counted)
        elif not tool_calls or all(client_tool_called(run, call) for call in tool_calls):
            # Calls to the client's own tools are answered by the client, in its next
            # request: the run ends here with the calls stored, and none runs on the server.
            step_finish(step, Run.Status.COMPLETED, **counted)
        else:
            step_hand_over(step, **counted)


def client_tool_called(run: Run, call: dict[str, str]) -> bool:
    """Whether `call` asks for one of the run's client-declared function tools."""
    return any(tool["function"]["name"] == call["name"] for tool in run.client_tools)


def _iteration_counted(
    step: Step, usage: dict[str, Any] | None, *, edits_seen: int
) -> dict[str, Any]:
    """The run's fields after this model call: one more iteration, its usage added to the
    run's, and the user's draft edits it saw (stored with the tool calls it asked for, so
    the tools step knows). The update writing them sets them on the run in hand too."""
    run = step.run
    totals = usage_added(run.usage, usage)
    # Plain values: only the lease's holder changes them, and the update they go with
    # checks the lease.
    return {
        "iterations": run.iterations + 1,
        "usage": totals,
        "draft_edits_seen": edits_seen,
        "attempt": 0,
    }


def _words_said(run: Run) -> bool:
    """Whether a reply of the run with words in it is stored already."""
    replies = Message.objects.filter(run=run, role=Message.Role.ASSISTANT).exclude(content="")
    return replies.exists()
