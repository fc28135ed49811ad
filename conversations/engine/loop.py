"""The one model-and-tools loop.

Every reply, wherever it is kept, goes round the same loop: call the model; if it asked
for tools, run them and call it again; stop when it answers without tools, asks only for
the client's own tools, is cut at its token limit, is stopped, fails, or reaches the most
rounds a reply may take (PARLEY_RUN_MAX_ITERATIONS, read here only). What differs between
a stored run, stateless chat and a response with `store: false` is where the loop writes:
a `RunSink` (engine/step.py: the database under the run's lease, and the run's event log;
engine/unstored.py: a history in memory and a list of events).

A stored run goes round one step per Celery task (engine/runner.py), its model calls
streamed holding no worker thread (engine/model_call.py); a run kept nowhere goes round
in the calling thread (`loop_run_inline`). Both decide with `loop_next`, call the model
as `model_request` says, settle the reply with `reply_settle` and run tools with
`tools_run`, so they word the same limits, emit the same events and run every tool.
"""

import uuid
from collections.abc import AsyncGenerator, Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any

from django.conf import settings

from conversations import context, metrics
from conversations.engine import eventlog, streaming
from conversations.engine.lease import Lease
from conversations.engine.llm.base import (
    GenerationSettings,
    Provider,
    ProviderError,
    StreamEvent,
    usage_added,
)
from conversations.engine.model_input_log import model_input_log
from conversations.engine.run_errors import cut_short_error, history_error, iterations_error
from conversations.engine.sink import (
    Action,
    CallModel,
    End,
    Position,
    RunSink,
    RunTools,
    ToolCall,
)
from conversations.engine.tool_budget import (
    call_refused,
    tool_calls_left,
    tool_choice_next,
    tools_offered,
)
from conversations.models import Message, Run
from conversations.services import NewMessage
from conversations.tools import (
    ToolContext,
    ToolResult,
    tool_definitions,
    tool_execute,
)


def client_tool_called(run: Run, call: ToolCall) -> bool:
    """Whether `call` asks for one of the run's client-declared function tools, which the
    client answers in its next request and the server never runs."""
    return any(tool["function"]["name"] == call["name"] for tool in run.client_tools)


def loop_next(run: Run, position: Position) -> Action:
    """What the run does next, from where it stands."""
    if position.calls is not None:
        if not position.calls:
            return End(Run.Status.COMPLETED)  # answered without tools
        pending = [call for call in position.calls if call["id"] not in position.answered]
        server = [call for call in pending if not client_tool_called(run, call)]
        if server:
            return RunTools(server)
        if pending:
            return End(Run.Status.COMPLETED)  # only the client's own calls are left
    if position.iterations >= settings.PARLEY_RUN_MAX_ITERATIONS:
        return End(Run.Status.INCOMPLETE, iterations_error(position.iterations))
    return CallModel()


# --- a model call ----------------------------------------------------------------------


@dataclass(frozen=True)
class ModelRequest:
    message_id: uuid.UUID
    model: str
    messages: list[context.ChatMessage]
    tools: list[dict[str, Any]]
    generation: GenerationSettings
    # The conversation's draft edits the model has seen (Run.draft_edits_seen).
    edits_seen: int
    # Why the call is not sent at all (the history does not fit and may not be cut).
    refused: ProviderError | None = None


def model_request(sink: RunSink, *, label: str) -> ModelRequest:
    """The next model call's input, logged, and its reply announced (`message.created`);
    or, when the history does not fit and the run may not drop its oldest turns, the call
    `refused` (announced nowhere: the run fails as a model server's refusal fails it)."""
    run, conversation = sink.run, sink.conversation
    # The same id on every attempt of this round: a retry restarts the same message.
    message_id = uuid.uuid5(run.id, f"assistant-{run.iterations + 1}")
    generation = GenerationSettings.effective(
        temperature=conversation.temperature,
        max_output_tokens=conversation.max_output_tokens,
        overrides=run.generation,
    )
    generation = replace(generation, tool_choice=tool_choice_next(sink))
    # Read with the model input: the user's edits up to here are ones the model knows of,
    # and a later edit wins over an update_draft this reply may ask for.
    edits_seen = conversation.draft_edit_count
    try:
        messages = sink.model_input()
    except context.HistoryTooLong as too_long:
        error = history_error(too_long.token_budget)
        return ModelRequest(
            message_id=message_id,
            model=run.model,
            messages=[],
            tools=[],
            generation=generation,
            edits_seen=edits_seen,
            refused=ProviderError(error["code"], error["message"]),
        )
    if run.instructions:
        # A response's instructions: the preamble of this run's calls, kept nowhere else.
        messages = [context.system_message(run.instructions), *messages]
    model_input_log(label, model=run.model, messages=messages, generation=generation)
    sink.writer.emit(
        eventlog.MESSAGE_CREATED, message_id=str(message_id), role="assistant", attempt=run.attempt
    )
    # The client's own function tools go with the server's; calls to them end the run.
    tools = [*tool_definitions(conversation.tools, user=conversation.owner), *run.client_tools]
    return ModelRequest(
        message_id=message_id,
        model=run.model,
        messages=messages,
        tools=tools_offered(run, tools),
        generation=generation,
        edits_seen=edits_seen,
    )


class _Refused:
    """A model call refused before it is sent: its stream fails at once, so the run ends
    as it does when the model server refuses a call."""

    name = "refused"

    def __init__(self, error: ProviderError) -> None:
        self.error = error

    async def stream(
        self,
        *,
        model: str,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        generation: GenerationSettings | None = None,
    ) -> AsyncGenerator[StreamEvent, None]:
        raise self.error
        yield  # an async generator, as providers' streams are


def reply_stream(
    sink: RunSink, request: ModelRequest, *, provider: Provider, follow_stops: bool = True
) -> streaming.ReplyStream:
    """The model call of `request`, to be started on the streaming loop."""
    if request.refused is not None:
        provider = _Refused(request.refused)
    return streaming.ReplyStream(
        provider=provider,
        model=request.model,
        messages=request.messages,
        tools=request.tools,
        writer=sink.writer,
        message_id=str(request.message_id),
        generation=request.generation,
        follow_stops=follow_stops,
    )


def reply_settle(sink: RunSink, request: ModelRequest, result: streaming.StreamResult) -> None:
    """Keep what the model said and decide how the run goes on, in one unit of writes."""
    run = sink.run
    if result.error is not None:
        if request.refused is None:
            metrics.provider_error(result.error.code)
        with sink.atomic():
            code, message = result.error.code, result.error.message
            sink.run_advance(status=Run.Status.FAILED, error={"code": code, "message": message})
        return
    reply, stopped = result.reply, result.stopped
    # Cut at its token limit: what it said is kept, but a tool call it was writing may be
    # cut mid-arguments, so none is run, and the run ends incomplete.
    cut_short = not stopped and reply.finish_reason == "length"
    calls = [] if stopped or cut_short else reply.tool_calls
    for call in calls:
        sink.writer.emit(
            eventlog.TOOL_CALL_COMPLETED,
            call_id=call["id"],
            name=call["name"],
            arguments=call["arguments"],
        )
    end: End | None = None
    if stopped:
        end = End(Run.Status.CANCELLED)
    elif cut_short:
        end = End(Run.Status.INCOMPLETE, cut_short_error(request.generation.max_output_tokens))
    elif not calls or all(client_tool_called(run, call) for call in calls):
        end = End(Run.Status.COMPLETED)
    counted: dict[str, Any] = {
        "iterations": run.iterations + 1,
        "usage": usage_added(run.usage, reply.usage),
        "draft_edits_seen": request.edits_seen,
        "attempt": 0,
    }
    with sink.atomic():
        # A reply stopped (or cut short) while the model was still thinking is kept too:
        # the user watched those thoughts, and a reload must not lose them.
        if reply.text or calls or reply.reasoning:
            kept = sink.message_keep(
                NewMessage(
                    id=request.message_id,
                    role=Message.Role.ASSISTANT,
                    content=reply.text,
                    tool_calls=calls,
                    run_id=run.id,
                    usage=reply.usage,
                    # The server's own fields with the reply, and why it ended.
                    provider_payload=reply.provider_payload(
                        "cancelled" if stopped else reply.finish_reason
                    ),
                    reasoning=reply.reasoning,
                    reasoning_ms=reply.reasoning_ms,
                )
            )
            sink.after_commit(lambda: sink.writer.emit(eventlog.MESSAGE_COMPLETED, message=kept))
        # Written last: a stored run's update also proves the lease is still ours, and
        # rolls everything back when it is not.
        if end is None:
            sink.run_advance(status=None, **counted)
        else:
            sink.run_advance(status=end.status, error=end.error, **counted)


# --- tools -----------------------------------------------------------------------------


def tools_run(sink: RunSink, calls: list[ToolCall]) -> None:
    """Run the reply's pending tool calls in order, keeping each result as soon as it
    exists (a crash after it never runs that call again), then hand the run on. A stop
    ends the run between calls, or abandons the call in flight (its result says so)."""
    run, conversation = sink.run, sink.conversation

    def emit(kind: str, payload: dict[str, Any]) -> None:
        sink.writer.emit(kind, **payload)

    # Every result kept counts against the run's limit, those of calls not run too, as
    # the limit is counted again from what the run kept after a crash.
    left = tool_calls_left(sink)
    for index, call in enumerate(calls):
        if sink.cancel_requested():
            with sink.atomic():
                sink.run_advance(status=Run.Status.CANCELLED)
            return
        result = call_refused(run, call, left=left)
        left = None if left is None else left - 1
        if result is None:
            tool_context = ToolContext(
                call_id=call["id"],
                # An earlier attempt of this round may have started this call before
                # dying: it ran the calls in order and kept each result at once, so only
                # the first one still pending can have been under way.
                is_resume=run.attempt > 1 and index == 0,
                conversation=conversation,
                user=conversation.owner,
                emit=emit,
                # Kept with the tool calls by the model call that asked for them.
                draft_edits_seen=run.draft_edits_seen,
                stored=sink.stored,
            )
            with sink.tool_running() as keepalive:
                result = _tool_call(
                    call, tool_context, keepalive=keepalive, stopped=sink.tool_stopped
                )
        kept = sink.tool_result_keep(
            NewMessage(
                role=Message.Role.TOOL,
                content=result.output,
                tool_call_id=call["id"],
                name=call["name"],
                run_id=run.id,
                provider_payload={"is_error": True} if result.is_error else None,
            ),
            result.images,
        )
        # The files go along only when there are some (the images a tool returned).
        files = {"attachments": kept.attachments} if kept.attachments else {}
        sink.writer.emit(
            eventlog.TOOL_RESULT_COMPLETED,
            call_id=call["id"],
            output=kept.output,
            is_error=result.is_error,
            # Names the kept result, so a reader can refer to it as kept.
            message_id=kept.message_id,
            **files,
        )
        if result.cancelled:
            # Stopped mid-call: the call's result says so, and the run ends here.
            with sink.atomic():
                sink.run_advance(status=Run.Status.CANCELLED)
            return
    with sink.atomic():
        sink.run_advance(status=None, attempt=0)


def _tool_call(
    call: ToolCall,
    tool_context: ToolContext,
    *,
    keepalive: Callable[[], None] | None,
    stopped: Callable[[], bool],
) -> ToolResult:
    return tool_execute(
        name=call["name"],
        arguments=call["arguments"],
        context=tool_context,
        enabled=tool_context.conversation.tools,
        keepalive=keepalive,
        keepalive_every=Lease.period(),
        stopped=stopped,
    )


# --- a run kept nowhere: the whole loop in this thread ---------------------------------


def loop_run_inline(sink: RunSink, *, provider: Provider, label: str) -> None:
    """Go round the loop until the run ends, in this thread (the model's replies stream on
    the process's streaming loop meanwhile)."""
    for action in _actions(sink):
        if isinstance(action, End):
            with sink.atomic():
                sink.run_advance(status=action.status, error=action.error)
        elif isinstance(action, RunTools):
            tools_run(sink, action.calls)
        else:
            request = model_request(sink, label=label)
            stream = reply_stream(sink, request, provider=provider, follow_stops=False)
            reply_settle(sink, request, stream.start().future.result())


def _actions(sink: RunSink) -> Iterator[Action]:
    while sink.run.status in Run.ACTIVE_STATUSES:
        yield loop_next(sink.run, sink.replied())
