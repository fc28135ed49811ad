"""The names of a run's events (the event protocol, modelled on OpenAI's Responses
streaming events), defined once: the engine's event log writes them, tools emit
`draft.updated`, and every reader compares against these names."""

from conversations.models import RunStatus

RUN_CREATED = "run.created"
RUN_IN_PROGRESS = "run.in_progress"
MESSAGE_CREATED = "message.created"
MESSAGE_DELTA = "message.delta"
# What a reasoning model thinks before it answers, streamed like the answer's text.
REASONING_DELTA = "reasoning.delta"
TOOL_CALL_CREATED = "tool_call.created"
TOOL_CALL_ARGUMENTS_DELTA = "tool_call.arguments.delta"
TOOL_CALL_COMPLETED = "tool_call.completed"
TOOL_RESULT_COMPLETED = "tool_result.completed"
MESSAGE_COMPLETED = "message.completed"
DRAFT_UPDATED = "draft.updated"
RUN_COMPLETED = "run.completed"
RUN_FAILED = "run.failed"
RUN_CANCELLED = "run.cancelled"
RUN_INCOMPLETE = "run.incomplete"

TERMINAL_TYPES = frozenset({RUN_COMPLETED, RUN_FAILED, RUN_CANCELLED, RUN_INCOMPLETE})
EVENT_TYPES = TERMINAL_TYPES | {
    *(RUN_CREATED, RUN_IN_PROGRESS, MESSAGE_CREATED, MESSAGE_DELTA, TOOL_CALL_CREATED),
    *(TOOL_CALL_ARGUMENTS_DELTA, TOOL_CALL_COMPLETED, TOOL_RESULT_COMPLETED, MESSAGE_COMPLETED),
    DRAFT_UPDATED,
    REASONING_DELTA,
}

_TERMINAL_BY_STATUS = {
    RunStatus.COMPLETED: RUN_COMPLETED,
    RunStatus.FAILED: RUN_FAILED,
    RunStatus.CANCELLED: RUN_CANCELLED,
    RunStatus.INCOMPLETE: RUN_INCOMPLETE,
}


def terminal_type(status: str) -> str:
    """The terminal event of a run that ended with `status`."""
    return _TERMINAL_BY_STATUS[RunStatus(status)]
