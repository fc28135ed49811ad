"""The per-run event log, on a Redis Stream.

Key `parley:run:<run_id>:events`, entry id `<sequence_number + 1>-0`, one field `e` holding the
JSON event `{"type", "run_id", "sequence_number", ...payload}`; numbered per run from 0, gapless.
Explicit ids also fence writers: Redis refuses an id not greater than the last one, so a stale
second writer gets `EventLogConflict` instead of interleaving. Writers coalesce deltas
(PARLEY_EVENT_COALESCE_MS / _CHARS): the first delta after a quiet spell is written at once,
later ones at most once per window, so a reply starts without delay and a fast one costs a
few writes a second, not one per token; the
terminal event sets the TTL (PARLEY_EVENT_TTL_SECONDS), and each writer's first write a long
safety TTL, so an abandoned log never lives forever. Readers replay (XRANGE) from any sequence
number, then follow live (XREAD BLOCK) from the same cursor, the id of the last event delivered:
no gap, no duplicate. They stop after the terminal event. Every door follows a run through
`run_follow` (or `run_follow_sync`), which also rides out a Redis restart, keeps alive at
silences and stops when its caller may no longer follow (follow.py); `events_all` is the one
plain read of what is stored.

Client rule for rebuilding replies (`message_texts`): concatenate `message.delta` per
`message_id`; a `message.created` for a message id already seen throws its text away and starts
it again, since a step retried after a worker crash re-streams the same message from the start.
`reasoning.delta` (what a reasoning model thinks before answering) follows the same rule for the
message's reasoning.
"""

from conversations.engine.eventlog.connections import redis_client
from conversations.engine.eventlog.follow import (
    KEEP_ALIVE,
    Followed,
    KeepAlive,
    StreamLost,
    run_follow,
    run_follow_sync,
)
from conversations.engine.eventlog.keys import (
    ENVELOPE,
    Event,
    EventLogConflict,
    RunId,
    stream_key,
)
from conversations.engine.eventlog.reader import (
    aevent_log_ended_by,
    aevent_log_exists,
    event_log_ensure_terminal,
    event_log_exists,
    event_log_last,
    events_all,
    message_texts,
)
from conversations.engine.eventlog.writer import EventRecorder, EventWriter
from conversations.event_types import (
    DRAFT_UPDATED,
    EVENT_TYPES,
    MESSAGE_COMPLETED,
    MESSAGE_CREATED,
    MESSAGE_DELTA,
    REASONING_DELTA,
    RUN_CANCELLED,
    RUN_COMPLETED,
    RUN_CREATED,
    RUN_FAILED,
    RUN_IN_PROGRESS,
    RUN_INCOMPLETE,
    TERMINAL_TYPES,
    TOOL_CALL_ARGUMENTS_DELTA,
    TOOL_CALL_COMPLETED,
    TOOL_CALL_CREATED,
    TOOL_RESULT_COMPLETED,
)

__all__ = [
    "DRAFT_UPDATED",
    "ENVELOPE",
    "EVENT_TYPES",
    "KEEP_ALIVE",
    "MESSAGE_COMPLETED",
    "MESSAGE_CREATED",
    "MESSAGE_DELTA",
    "REASONING_DELTA",
    "RUN_CANCELLED",
    "RUN_COMPLETED",
    "RUN_CREATED",
    "RUN_FAILED",
    "RUN_INCOMPLETE",
    "RUN_IN_PROGRESS",
    "TERMINAL_TYPES",
    "TOOL_CALL_ARGUMENTS_DELTA",
    "TOOL_CALL_COMPLETED",
    "TOOL_CALL_CREATED",
    "TOOL_RESULT_COMPLETED",
    "Event",
    "EventLogConflict",
    "EventRecorder",
    "EventWriter",
    "Followed",
    "KeepAlive",
    "RunId",
    "StreamLost",
    "aevent_log_ended_by",
    "aevent_log_exists",
    "event_log_ensure_terminal",
    "event_log_exists",
    "event_log_last",
    "events_all",
    "message_texts",
    "redis_client",
    "run_follow",
    "run_follow_sync",
    "stream_key",
]
