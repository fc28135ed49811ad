"""The run event log's shape: the stream key and the entry format (the event types are
the domain's, in conversations/event_types.py).

The package's __init__ is its public face; writer.py appends, reader.py replays and
follows, connections.py holds the Redis clients.
"""

from typing import Any
from uuid import UUID

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


# --- entries ---------------------------------------------------------------------------


def as_text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def entry_id(sequence: int) -> str:
    return f"{sequence + 1}-0"


def entry_sequence(stream_id: Any) -> int:
    return int(as_text(stream_id).partition("-")[0]) - 1


def entry_json(entry: Any) -> str:
    fields = entry[1]
    # Clients made with decode_responses=True answer str keys.
    return as_text(fields[FIELD.encode()] if FIELD.encode() in fields else fields[FIELD])
