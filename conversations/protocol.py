"""What clients are sent, declared once: every run event, every conversation
notification and every websocket frame, each type with the shape of its payload.

The names are defined where they are written (`event_types.py`, `notifications.py`);
this module says what each carries. The test suite checks every event, notification and
frame it makes against these declarations (tests/support/protocol_check.py), so a payload that
drifts from its declaration, or a type nobody declared, fails the test that made it.
Declarations are strict: an unknown key, a missing one or a wrong type is a violation.
"""

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from conversations import event_types as ev
from conversations import notifications as nt
from conversations.errors.vocabulary import VOCABULARY


class _Shape(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


Id = str  # a UUID, as text
When = str  # ISO 8601 with its offset
Seq = Annotated[int, Field(ge=0)]
RunStatus = Literal["queued", "in_progress", "completed", "failed", "cancelled", "incomplete"]


class Problem(_Shape):
    code: str
    message: str


class Run(_Shape):
    id: Id
    conversation_id: Id | None  # None for a run kept nowhere
    branch_id: Id | None
    status: RunStatus
    model: str
    iterations: int
    usage: dict[str, Any]
    error: Problem | None
    trigger_message_id: Id | None
    created_at: When | None
    started_at: When | None
    finished_at: When | None
    cancel_requested_at: When | None


class ToolCall(_Shape):
    id: str
    name: str
    arguments: str


class Alternatives(_Shape):
    index: int
    count: int
    branch_ids: list[Id]


class Attachment(_Shape):
    id: Id
    filename: str
    content_type: str
    size: int


class Message(_Shape):
    id: Id
    conversation_id: Id | None  # None for a reply kept nowhere
    branch_id: Id | None
    seq: int
    role: Literal["user", "assistant", "tool", "system"]
    kind: Literal["message", "event", "draft_edit", "compaction"]
    content: str
    reasoning: str
    reasoning_ms: int | None
    tool_calls: list[ToolCall]
    tool_call_id: str | None
    name: str | None
    created_at: When | None
    run_id: Id | None
    usage: dict[str, Any] | None
    provider_payload: dict[str, Any] | None
    attachments: list[Attachment]
    alternatives: Alternatives | None


class Branch(_Shape):
    id: Id
    parent_id: Id | None
    fork_seq: int
    created_at: When | None
    message_count: int


# --- run events (a run's event log) ----------------------------------------------------


class _RunEvent(_Shape):
    run_id: Id
    sequence_number: Seq


class RunChanged(_RunEvent):
    type: Literal[
        "run.created",
        "run.in_progress",
        "run.completed",
        "run.failed",
        "run.cancelled",
        "run.incomplete",
    ]
    run: Run


class MessageCreated(_RunEvent):
    type: Literal["message.created"]
    message_id: Id
    role: Literal["assistant"]
    attempt: int


class TextDelta(_RunEvent):
    type: Literal["message.delta", "reasoning.delta"]
    message_id: Id
    delta: str


class ToolCallCreated(_RunEvent):
    type: Literal["tool_call.created"]
    message_id: Id
    call_id: str
    name: str


class ToolCallArgumentsDelta(_RunEvent):
    type: Literal["tool_call.arguments.delta"]
    call_id: str
    delta: str


class ToolCallCompleted(_RunEvent):
    type: Literal["tool_call.completed"]
    call_id: str
    name: str
    arguments: str


class ToolResultCompleted(_RunEvent):
    type: Literal["tool_result.completed"]
    call_id: str
    output: str
    is_error: bool
    message_id: Id
    # Only when the tool returned images a stored run kept as files on its result.
    attachments: list[Attachment] = Field(default_factory=list)


class MessageCompleted(_RunEvent):
    type: Literal["message.completed"]
    message: Message


class DraftUpdated(_RunEvent):
    type: Literal["draft.updated"]
    draft: str


RUN_EVENTS: dict[str, type[_Shape]] = {
    **dict.fromkeys((ev.RUN_CREATED, ev.RUN_IN_PROGRESS, *ev.TERMINAL_TYPES), RunChanged),
    ev.MESSAGE_CREATED: MessageCreated,
    ev.MESSAGE_DELTA: TextDelta,
    ev.REASONING_DELTA: TextDelta,
    ev.TOOL_CALL_CREATED: ToolCallCreated,
    ev.TOOL_CALL_ARGUMENTS_DELTA: ToolCallArgumentsDelta,
    ev.TOOL_CALL_COMPLETED: ToolCallCompleted,
    ev.TOOL_RESULT_COMPLETED: ToolResultCompleted,
    ev.MESSAGE_COMPLETED: MessageCompleted,
    ev.DRAFT_UPDATED: DraftUpdated,
}


# --- conversation notifications (the Channels groups) ----------------------------------


class _Notification(_Shape):
    conversation_id: Id


class MessageStored(_Notification):
    type: Literal["conversation.message"]
    message: Message


class RunNotice(_Notification):
    type: Literal["conversation.run_started", "conversation.run_ended"]
    run: Run


class ConversationUpdated(_Notification):
    """The settings that changed, and only those."""

    type: Literal["conversation.updated"]
    title: str | None = None
    system_prompt: str | None = None
    model: str | None = None
    tools: list[str] | None = None
    metadata: dict[str, str] | None = None
    archived_at: When | None = None
    temperature: float | int | None = None
    max_output_tokens: int | None = None
    vision: bool | None = None
    active_branch_id: Id | None = None


class BranchCreated(_Notification):
    type: Literal["conversation.branch_created"]
    branch: Branch


class DraftChanged(_Notification):
    type: Literal["conversation.draft_updated"]
    draft: str
    by: Literal["user", "assistant"]


class Deleted(_Notification):
    type: Literal["conversation.deleted"]


class ManyDeleted(_Shape):
    type: Literal["conversations.deleted"]
    conversation_ids: list[Id]


class Organised(_Notification):
    """To every socket of the owner: a conversation's pin, folder and tags as they are now."""

    type: Literal["conversation.organised"]
    pinned: bool
    folder_id: Id | None
    tags: list[str]


class FolderItem(_Shape):
    id: Id
    name: str
    position: Annotated[int, Field(ge=0)]


class FoldersChanged(_Shape):
    """To every socket of the owner: their whole folder list, in their order."""

    type: Literal["folders.changed"]
    folders: list[FolderItem]


NOTIFICATIONS: dict[str, type[_Shape]] = {
    nt.MESSAGE_STORED: MessageStored,
    nt.RUN_STARTED: RunNotice,
    nt.RUN_ENDED: RunNotice,
    nt.UPDATED: ConversationUpdated,
    nt.BRANCH_CREATED: BranchCreated,
    nt.DRAFT_CHANGED: DraftChanged,
    nt.DELETED: Deleted,
    nt.MANY_DELETED: ManyDeleted,
    nt.ORGANISED: Organised,
    nt.FOLDERS_CHANGED: FoldersChanged,
}


# --- websocket frames (server to client) -----------------------------------------------


class Connected(_Shape):
    type: Literal["conversation.connected"]
    conversation_id: Id
    active_run_id: Id | None


class ProblemAt(_Shape):
    path: str
    message: str


class ErrorFrame(_Shape):
    """A refusal of the error vocabulary (conversations/errors), the socket staying open;
    the error's details beside its code."""

    type: Literal["error"]
    code: str
    message: str
    problems: list[ProblemAt] | None = None
    # A lost run stream says which run and where to resume from.
    run_id: Id | None = None
    after: int | None = None
    retry_after: int | None = None
    # `insufficient_scope`: the scope the frame needs.
    required_scope: str | None = None

    @field_validator("code")
    @classmethod
    def _in_the_vocabulary(cls, code: str) -> str:
        if code not in VOCABULARY:
            raise ValueError(f"{code!r} is not a code of the error vocabulary")
        return code


class Pong(_Shape):
    type: Literal["pong"]


SOCKET_FRAMES: dict[str, type[_Shape]] = {
    **RUN_EVENTS,
    **NOTIFICATIONS,
    "conversation.connected": Connected,
    "error": ErrorFrame,
    "pong": Pong,
}

# --- checking --------------------------------------------------------------------------


def protocol_problems(registry: dict[str, type[_Shape]], payload: Any) -> list[str]:
    """What is wrong with `payload` (JSON as a client reads it) against the declaration
    of its type in `registry`; empty when it conforms."""
    if not isinstance(payload, dict) or not isinstance(payload.get("type"), str):
        return ["not an object with a string 'type'"]
    shape = registry.get(payload["type"])
    if shape is None:
        return [f"undeclared type {payload['type']!r}"]
    try:
        shape.model_validate(payload)
    except ValidationError as error:
        return [
            f"{'.'.join(str(part) for part in item['loc']) or '(payload)'}: {item['msg']}"
            for item in error.errors(include_url=False)
        ]
    return []
