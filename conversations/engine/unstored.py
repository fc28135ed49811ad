"""Runs kept nowhere: stateless chat and responses with `store: false`.

The one loop (engine/loop.py) writes to an `UnstoredRun`: its replies and tool results
join a history in memory, its events a list numbered as a stored run's log would number
them, and the draft a tool rewrites lives on an unsaved conversation for as long as the
request. Nothing touches the database; the caller decides what of it leaves the process
(a stateless state string, a Response object and its stream events).
"""

import contextlib
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from conversations import context
from conversations.engine import eventlog
from conversations.engine.llm.base import Provider
from conversations.engine.loop import loop_run_inline
from conversations.engine.sink import KeptResult, Position, history_truncated
from conversations.event_types import terminal_type
from conversations.models import Conversation, Message, Run
from conversations.serializers import message_export_dict, run_payload
from conversations.services import NewMessage, message_quota_take
from conversations.tools import ToolImage

# A message of the history, in the form a stateless state carries it.
Kept = dict[str, Any]


@dataclass
class UnstoredRun:
    run: Run
    # Unsaved: the owner, the tools enabled, the generation settings and the draft.
    conversation: Conversation
    # The preamble: system messages sent first on every call, never part of the history.
    head: list[context.ChatMessage] = field(default_factory=list)
    # What came before this run (stored rows, or a state's messages) and the request's
    # own input: the model reads it, the run never changes it.
    before: Sequence[context.StoredMessage] = ()
    # Reads the files of stored rows in `before` that the model's input keeps.
    files_read: context.FilesRead | None = None
    # The messages this run added, in order.
    kept: list[Kept] = field(default_factory=list)
    writer: eventlog.EventRecorder = field(init=False)
    stored = False

    def __post_init__(self) -> None:
        self.writer = eventlog.EventRecorder(self.run.pk)

    @property
    def events(self) -> list[dict[str, Any]]:
        return self.writer.events

    def reply_text(self) -> str:
        """What the run's last model call said (empty when it said nothing)."""
        created = [e for e in self.events if e["type"] == eventlog.MESSAGE_CREATED]
        if not created:
            return ""
        return eventlog.message_texts(self.events).get(created[-1]["message_id"], "")

    # --- the loop's sink ------------------------------------------------------------

    def model_input(self) -> list[context.ChatMessage]:
        budget = settings.PARLEY_CONTEXT_TOKENS - sum(context.estimate_tokens(m) for m in self.head)
        body = context.build_model_input(
            system_prompt="",
            history=[*self.before, *(history_message(m) for m in self.kept)],
            draft=self.conversation.draft,
            token_budget=budget,
            files_read=self.files_read,
            truncate=history_truncated(self.run),
        )
        return self.head + body

    def replied(self) -> Position:
        iterations = self.run.iterations
        last = next(
            (n for n in range(len(self.kept) - 1, -1, -1) if self.kept[n]["role"] == "assistant"),
            None,
        )
        if last is None:
            return Position(iterations=iterations, calls=None, answered=frozenset())
        answered = frozenset(
            m["tool_call_id"] for m in self.kept[last + 1 :] if m["role"] == "tool"
        )
        return Position(
            iterations=iterations,
            calls=self.kept[last].get("tool_calls", []),
            answered=answered,
            tool_results=sum(1 for m in self.kept if m["role"] == "tool"),
        )

    def atomic(self) -> contextlib.AbstractContextManager[Any]:
        return contextlib.nullcontext()

    def after_commit(self, action: Callable[[], object]) -> None:
        action()  # nothing to wait for: nothing is written

    def message_keep(self, message: NewMessage) -> dict[str, Any]:
        kept: Kept = {"role": message.role, "content": message.content}
        if message.tool_calls:
            kept["tool_calls"] = message.tool_calls
        self.kept.append(kept)
        return self._payload(message)

    def tool_result_keep(
        self, message: NewMessage, images: tuple[ToolImage, ...] = ()
    ) -> KeptResult:
        # Images are kept nowhere either: the text names them, as the model reads it.
        self.kept.append(
            {
                "role": "tool",
                "tool_call_id": message.tool_call_id,
                "name": message.name,
                "content": message.content,
            }
        )
        message_id = uuid.uuid5(self.run.pk, f"tool-{message.tool_call_id}")
        return KeptResult(message_id=str(message_id), output=message.content)

    def run_advance(
        self, *, status: str | None, error: dict[str, str] | None = None, **fields: Any
    ) -> None:
        for name, value in fields.items():
            setattr(self.run, name, value)
        if status is None:
            # The next round begins at once, as its first attempt (a stored run's next
            # step counts its attempt when it takes the lease).
            self.run.attempt = 1
            return
        self.run.status, self.run.error, self.run.finished_at = status, error, timezone.now()
        self.writer.emit(terminal_type(status), run=run_payload(self.run))

    def cancel_requested(self) -> bool:
        return False  # no client can name a run kept nowhere to stop it

    def tool_stopped(self) -> bool:
        return False

    @contextlib.contextmanager
    def tool_running(self) -> Iterator[Callable[[], None] | None]:
        yield None  # no lease to keep alive

    def _payload(self, message: NewMessage) -> dict[str, Any]:
        """The reply as a stored one's payload reads, with no conversation or branch."""
        row = Message(
            id=message.id or uuid.uuid4(),
            seq=len(self.before) + len(self.kept),
            role=message.role,
            content=message.content,
            tool_calls=message.tool_calls,
            run_id=message.run_id,
            usage=message.usage,
            provider_payload=message.provider_payload,
            reasoning=message.reasoning,
            reasoning_ms=message.reasoning_ms,
            created_at=timezone.now(),
        )
        return {
            **message_export_dict(row),
            "conversation_id": None,
            "attachments": [],
            "alternatives": None,
        }


def history_message(message: Kept) -> context.HistoryMessage:
    return context.HistoryMessage(
        role=message["role"],
        content=message["content"],
        tool_calls=message.get("tool_calls", []),
        tool_call_id=message.get("tool_call_id", ""),
    )


def unstored_run(
    *,
    owner: Any,
    model: str,
    tools: list[str],
    draft: str = "",
    conversation: Conversation | None = None,
    **fields: Any,
) -> tuple[Run, Conversation]:
    """An unsaved run, in progress, and the unsaved conversation its tools act on: a copy
    of `conversation`'s settings when the run reads one, else the server's defaults.
    QuotaExceeded once the owner's daily messages are used up: a turn kept nowhere makes
    the model work as a stored one does, so it counts as one."""
    with transaction.atomic():
        message_quota_take(user_id=owner.pk)
    now = timezone.now()
    scratch = Conversation(owner=owner, tools=tools, draft=draft)
    if conversation is not None:
        scratch.system_prompt = conversation.system_prompt
        scratch.temperature = conversation.temperature
        scratch.max_output_tokens = conversation.max_output_tokens
    run = Run(
        id=uuid.uuid4(),
        conversation_id=None,  # type: ignore[misc]  # an unsaved run of no conversation
        status=Run.Status.IN_PROGRESS,
        created_at=now,
        started_at=now,
        attempt=1,
        model=model,
        **fields,
    )
    return run, scratch


def unstored_run_go(sink: UnstoredRun, *, provider: Provider, label: str) -> None:
    """Announce the run as a stored run's log would, then go round the loop until it
    ends."""
    payload = run_payload(sink.run)
    sink.writer.emit(eventlog.RUN_CREATED, run=payload)
    sink.writer.emit(eventlog.RUN_IN_PROGRESS, run=payload)
    loop_run_inline(sink, provider=provider, label=label)
