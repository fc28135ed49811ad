"""What a run's loop reads and writes through (a `RunSink`: the database and the run's
event log for a stored run, memory for one kept nowhere), and the loop's decisions."""

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Protocol

from conversations import context
from conversations.engine import eventlog
from conversations.models import Conversation, Run
from conversations.services import NewMessage
from conversations.tools import ToolImage

ToolCall = dict[str, str]


@dataclass(frozen=True)
class KeptResult:
    """A tool's result as kept: the message's id and text, and the files it carries (as
    message payloads list them)."""

    message_id: str
    output: str
    attachments: list[dict[str, Any]] = field(default_factory=list)


class RunSink(Protocol):
    """Where a run's loop reads what it kept and writes what happens."""

    @property
    def run(self) -> Run: ...

    @property
    def conversation(self) -> Conversation:
        """The conversation the tools act on: stored, or an unsaved one holding the tools
        enabled and the draft of a reply kept nowhere."""
        ...

    @property
    def writer(self) -> eventlog.EventWriter:
        """The run's events: its log, or a recorder."""
        ...

    @property
    def stored(self) -> bool:
        """Whether what the run does is kept (a stored run) or lives only as long as the
        request (stateless chat, a response with `store: false`)."""
        ...

    def model_input(self) -> list[context.ChatMessage]:
        """The history and trailing context for the next model call (no instructions)."""
        ...

    def replied(self) -> "Position":
        """Where the run stands, from what it kept."""
        ...

    def atomic(self) -> AbstractContextManager[Any]:
        """A unit of writes that all happen or none do."""
        ...

    def after_commit(self, action: Callable[[], object]) -> None:
        """Run `action` once the current unit of writes is kept."""
        ...

    def message_keep(self, message: NewMessage) -> dict[str, Any]:
        """Keep a reply (inside `atomic`); its payload as clients see messages."""
        ...

    def tool_result_keep(
        self, message: NewMessage, images: tuple[ToolImage, ...] = ()
    ) -> KeptResult:
        """Keep a tool's result the moment it exists, with the images the tool returned
        as files on it where the run is stored (dropped elsewhere: the text names them)."""
        ...

    def run_advance(
        self, *, status: str | None, error: dict[str, str] | None = None, **fields: Any
    ) -> None:
        """End the run with `status`, or (None) let its next round begin; `fields` are
        written with it."""
        ...

    def cancel_requested(self) -> bool: ...

    def tool_stopped(self) -> bool:
        """Whether a stop was asked for, looked for often while a tool runs (cheaply)."""
        ...

    def tool_running(self) -> AbstractContextManager[Callable[[], None] | None]:
        """Around one tool call: yields the keep-alive to call while it runs, if any."""
        ...


@dataclass(frozen=True)
class Position:
    """Where a run stands: its model calls so far, the tool calls of its last reply (None
    before its first), and which of those have a result kept."""

    iterations: int
    calls: list[ToolCall] | None
    answered: frozenset[str]
    # The results of server tool calls the run kept, over all its replies: counted only
    # for a run with a tool call limit (`tool_calls_limit`), else 0.
    tool_results: int = 0


def history_truncated(run: Run) -> bool:
    """Whether the oldest turns that do not fit the model's input are dropped (the
    default), or the run fails instead (a response's `truncation: disabled`)."""
    return (run.generation or {}).get("truncation") != "disabled"


def tool_calls_limit(run: Run) -> int | None:
    """The most calls the run's server tools may make (a response's `max_tool_calls`)."""
    limit = (run.generation or {}).get("max_tool_calls")
    return limit if isinstance(limit, int) else None


@dataclass(frozen=True)
class End:
    status: str
    error: dict[str, str] | None = None


@dataclass(frozen=True)
class RunTools:
    calls: list[ToolCall]


class CallModel:
    """The next round is a model call."""


Action = End | RunTools | CallModel
