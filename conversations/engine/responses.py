"""Responses of the OpenAI-compatible API: a response is a run.

- `response_start`: the request's input stored as messages on the branch the run answers
  on, and a queued run carrying what the request asked for besides (instructions, client
  tools, generation settings, metadata), in one transaction (`runs.run_begin`). Continuing
  from a response that is no longer the tip of its branch forks a new branch there, as an
  edit does, so the older path stays as an alternative.
- `response_unstored`: `store: false`. The tool loop runs in this process over the
  history the request names plus its input, nothing is written, and what happened comes
  back as the event list a stored run's log would hold, so the transport answers both
  kinds alike.
"""

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from accounts.models import User
from conversations import context, selectors, services
from conversations.engine import eventlog, streaming
from conversations.engine.llm import provider_get
from conversations.engine.llm.base import GenerationSettings, ProviderError, usage_added
from conversations.engine.model_call import client_tool_called
from conversations.engine.model_input_log import model_input_log
from conversations.engine.run_errors import cut_short_error
from conversations.engine.runs import run_begin
from conversations.engine.stateless import STATELESS_TOOLS, stateless_tool_run
from conversations.event_types import terminal_type
from conversations.models import Branch, Conversation, Message, Run
from conversations.serializers import run_payload
from conversations.services import NewMessage
from conversations.tools import tool_definitions


@dataclass(frozen=True)
class ResponseAsk:
    """What a response request asks for besides where it goes."""

    messages: Sequence[NewMessage]
    model: str = ""
    instructions: str = ""
    client_tools: list[dict[str, Any]] = field(default_factory=list)
    generation: dict[str, Any] = field(default_factory=dict)
    metadata: dict[str, str] = field(default_factory=dict)
    options: dict[str, Any] = field(default_factory=dict)

    def run_fields(self) -> dict[str, Any]:
        fields: dict[str, Any] = {
            "instructions": self.instructions,
            "client_tools": self.client_tools,
            "generation": self.generation,
            "metadata": self.metadata,
            "options": self.options,
        }
        if self.model:
            fields["model"] = self.model
        return fields


def response_start(
    *,
    user: User,
    ask: ResponseAsk,
    conversation: Conversation | None = None,
    previous: Run | None = None,
) -> Run:
    """Store the input and start the run answering it: in `conversation`, after the
    response `previous`, or in a new conversation when neither is given. RunActive while
    another run of that conversation is active; nothing is stored then."""
    with transaction.atomic():
        if previous is not None:
            conversation = previous.conversation
        elif conversation is None:
            conversation = services.conversation_create(owner=user)
        target = conversation

        def prepare(locked: Conversation, run_id: uuid.UUID) -> tuple[Branch, Message, Message]:
            branch = _branch_after(target, previous) if previous is not None else None
            branch, rows = services.response_input_store(
                conversation=target,
                locked=locked,
                messages=ask.messages,
                branch=branch,
                run_id=run_id,
            )
            return branch, rows[-1], rows[-1]

        _, _, run = run_begin(conversation=target, client_id="", prepare=prepare)
        # In the transaction that created the run: no worker sees it before these.
        fields = ask.run_fields()
        if previous is not None:
            fields["options"] = {**ask.options, "previous_run_id": str(previous.pk)}
        Run.objects.filter(pk=run.pk).update(**fields)
        for name, value in fields.items():
            setattr(run, name, value)
    return run


def _branch_after(conversation: Conversation, previous: Run) -> Branch:
    """The branch a response continuing `previous` goes on: the previous one's own, or a
    fork of it right after the previous response's last message when its path went on."""
    branch = selectors.branch_get(conversation=conversation, branch_id=previous.branch_id)
    last = (
        Message.objects.filter(run=previous, branch=branch).order_by("-seq").first()
        or previous.trigger_message
    )
    tip = last.seq if last is not None else branch.message_count
    if tip >= branch.message_count:
        return branch
    return services.branch_fork(conversation=conversation, source=branch, fork_seq=tip)


# --- store: false ----------------------------------------------------------------------


@dataclass
class _Log:
    """The events a stored run's log would hold, numbered the same way."""

    run_id: str
    events: list[dict[str, Any]] = field(default_factory=list)

    def emit(self, kind: str, **payload: Any) -> None:
        event = {"type": kind, "run_id": self.run_id, "sequence_number": len(self.events)}
        self.events.append({**event, **payload})


def response_unstored(
    *,
    user: User,
    ask: ResponseAsk,
    conversation: Conversation | None = None,
    previous: Run | None = None,
) -> tuple[Run, list[dict[str, Any]]]:
    """Run a response that keeps nothing: an unsaved run (its fields as a stored one's)
    and the events of its run. The history is the named conversation's or previous
    response's path (read, never written) followed by the input."""
    now = timezone.now()
    run = Run(
        id=uuid.uuid4(),
        conversation_id=None,  # type: ignore[misc]  # an unsaved run of no conversation
        status=Run.Status.IN_PROGRESS,
        created_at=now,
        started_at=now,
        model=ask.model or settings.PARLEY_MODEL,
        **{k: v for k, v in ask.run_fields().items() if k != "model"},
    )
    if previous is not None:
        run.options = {**ask.options, "previous_run_id": str(previous.pk)}
    log = _Log(str(run.id))
    log.emit(eventlog.RUN_CREATED, run=run_payload(run))
    log.emit(eventlog.RUN_IN_PROGRESS, run=run_payload(run))
    history = _history(conversation=conversation, previous=previous)
    history += [context.chat_message(new) for new in ask.messages]
    try:
        status, error = _loop(run, log, history=history, user=user)
    except ProviderError as failure:
        status, error = Run.Status.FAILED, {"code": failure.code, "message": failure.message}
    run.status, run.error, run.finished_at = status, error, timezone.now()
    log.emit(terminal_type(status), run=run_payload(run))
    return run, log.events


def _history(*, conversation: Conversation | None, previous: Run | None) -> list[dict[str, Any]]:
    if previous is not None:
        branch = selectors.branch_get(
            conversation=previous.conversation, branch_id=previous.branch_id
        )
        last = Message.objects.filter(run=previous).order_by("-seq").first()
        branch.message_count = last.seq if last is not None else branch.message_count
        return selectors.conversation_model_input(conversation=previous.conversation, branch=branch)
    if conversation is not None:
        return selectors.conversation_model_input(conversation=conversation)
    return []


def _loop(
    run: Run, log: _Log, *, history: list[dict[str, Any]], user: User
) -> tuple[str, dict[str, str] | None]:
    provider = provider_get()
    generation = GenerationSettings.effective(overrides=run.generation)
    head = [context.system_message(run.instructions)] if run.instructions else []
    tools = [*tool_definitions(STATELESS_TOOLS), *run.client_tools]
    # An unsaved conversation: the stateless tools read nothing from it.
    scratch = Conversation(owner=user, tools=STATELESS_TOOLS)
    for iteration in range(settings.PARLEY_RUN_MAX_ITERATIONS):
        message_id = str(uuid.uuid5(run.id, f"assistant-{iteration + 1}"))
        log.emit(eventlog.MESSAGE_CREATED, message_id=message_id, role="assistant", attempt=1)
        model_input = head + history
        model_input_log(
            f"response {run.id}", model=run.model, messages=model_input, generation=generation
        )
        reply = streaming.stream_collect(
            provider, model=run.model, messages=model_input, tools=tools, generation=generation
        )
        _usage_add(run, reply.usage)
        cut_short = reply.finish_reason == "length"
        calls = [] if cut_short else reply.tool_calls
        if reply.text:
            log.emit(eventlog.MESSAGE_DELTA, message_id=message_id, delta=reply.text)
        for call in calls:
            log.emit(
                eventlog.TOOL_CALL_CREATED,
                message_id=message_id,
                call_id=call["id"],
                name=call["name"],
            )
            arguments = call["arguments"]
            log.emit(eventlog.TOOL_CALL_ARGUMENTS_DELTA, call_id=call["id"], delta=arguments)
        for call in calls:
            log.emit(
                eventlog.TOOL_CALL_COMPLETED,
                call_id=call["id"],
                name=call["name"],
                arguments=call["arguments"],
            )
        assistant = context.HistoryMessage(role="assistant", content=reply.text, tool_calls=calls)
        log.emit(
            eventlog.MESSAGE_COMPLETED,
            message={"id": message_id, "role": "assistant", "content": reply.text},
        )
        history.append(context.chat_message(assistant))
        if cut_short:
            return Run.Status.INCOMPLETE, cut_short_error(generation.max_output_tokens)
        server = [call for call in calls if not client_tool_called(run, call)]
        if not server:
            return Run.Status.COMPLETED, None
        for call in server:
            result = stateless_tool_run(call, user=user, scratch=scratch)
            log.emit(
                eventlog.TOOL_RESULT_COMPLETED,
                call_id=call["id"],
                output=result.output,
                is_error=result.is_error,
                message_id=str(uuid.uuid5(run.id, f"tool-{call['id']}")),
            )
            history.append({"role": "tool", "tool_call_id": call["id"], "content": result.output})
    message = f"Parley stopped after {run.iterations} rounds of tool calls in one reply."
    return Run.Status.INCOMPLETE, {"code": "max_iterations", "message": message}


def _usage_add(run: Run, usage: dict[str, Any] | None) -> None:
    run.iterations += 1
    run.usage = usage_added(run.usage, usage)
