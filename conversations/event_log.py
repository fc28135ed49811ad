"""The run event log's shape: event types, the stream key, the entry format, and the
Redis client. conversations/events.py is the public face (reading, and re-exports);
conversations/event_writer.py appends.
"""

import threading
from typing import Any
from uuid import UUID

import redis
from django.conf import settings

from conversations.redis_async import SOCKET_TIMEOUT

RUN_CREATED = "run.created"
RUN_IN_PROGRESS = "run.in_progress"
MESSAGE_CREATED = "message.created"
MESSAGE_DELTA = "message.delta"
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
}
ENVELOPE = frozenset({"type", "run_id", "sequence_number"})

FIELD = "e"
SAFETY_TTL_SECONDS = 7 * 24 * 3600
PAGE = 500
DEFAULT_BLOCK_MS = 5000
MAX_BLOCK_MS = 20_000

Event = dict[str, Any]
RunId = str | UUID


class EventLogConflict(Exception):
    """Another writer holds this sequence number with another event: this writer is stale."""


def stream_key(run_id: RunId) -> str:
    return f"parley:run:{run_id}:events"


_pools: dict[str, redis.BlockingConnectionPool] = {}
_clients: dict[str, redis.Redis] = {}
_pools_lock = threading.Lock()


def redis_client() -> redis.Redis:
    """This process's client for settings.REDIS_URL (read per call: tests change it).

    One client per pool, shared by every thread (redis-py clients are thread-safe): a
    streaming step asks Redis about once a second, and building a client cost more than
    the command it sent.
    """
    url = settings.REDIS_URL
    with _pools_lock:
        pool = _pools.get(url)
        if pool is None:
            # Blocking: a worker with more threads than connections waits its turn for
            # one instead of failing the step (redis-py 8 caps a plain pool and raises).
            pool = _pools[url] = redis.BlockingConnectionPool.from_url(
                url,
                socket_timeout=SOCKET_TIMEOUT,
                max_connections=settings.PARLEY_REDIS_MAX_CONNECTIONS,
                timeout=SOCKET_TIMEOUT,
            )
        client = _clients.get(url)
        if client is None or client.connection_pool is not pool:  # a new pool, a new client
            client = _clients[url] = redis.Redis(connection_pool=pool)
    return client


# --- entries ---------------------------------------------------------------------------


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _entry_id(sequence: int) -> str:
    return f"{sequence + 1}-0"


def _sequence(entry_id: Any) -> int:
    return int(_text(entry_id).partition("-")[0]) - 1


def _raw(entry: Any) -> str:
    fields = entry[1]
    # Clients made with decode_responses=True answer str keys.
    return _text(fields[FIELD.encode()] if FIELD.encode() in fields else fields[FIELD])
