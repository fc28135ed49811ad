"""Keyset page cursors: an opaque, URL-safe encoding of the last row a page showed, as
(time, id), or (flag, time, id) for a list ordered by a flag first. Clients pass them
back untouched; a cursor that does not decode is a 400."""

import base64
import binascii
import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Generic, TypeVar
from uuid import UUID

from conversations.errors import Problem, ValidationFailed
from conversations.json_input import json_parse

# The most rows one page holds, whatever the caller asks for.
MAX_PAGE = 200
T = TypeVar("T")


@dataclass(frozen=True)
class Page(Generic[T]):
    items: list[T]
    # Opaque cursor for the next page, or None on the last page.
    next_cursor: str | None


def page_limit(limit: int) -> int:
    """The page size asked for, within 1..MAX_PAGE."""
    return max(1, min(int(limit), MAX_PAGE))


def cursor_encode(position: list[Any]) -> str:
    """`[time in ISO 8601, id]`, or a list of the caller's own meaning (an empty one)."""
    return base64.urlsafe_b64encode(json.dumps(position).encode()).decode().rstrip("=")


def cursor_decode(cursor: str) -> tuple[datetime, UUID] | None:
    """The (time, id) a cursor holds, or None for an empty position; ValidationFailed for
    anything else."""
    try:
        position = _position(cursor)
        return None if position == [] else _time_and_id(position)
    except (ValueError, TypeError, OverflowError, binascii.Error):
        raise _invalid() from None


def cursor_decode_flagged(cursor: str) -> tuple[bool, datetime, UUID]:
    """The (flag, time, id) of a cursor `[flag, time, id]` (a list ordered by a flag
    first, such as pinned conversations first); a `[time, id]` cursor, made before the
    flag ordered anything, is one among the rows without it. ValidationFailed for
    anything else."""
    try:
        position = _position(cursor)
        if isinstance(position, list) and len(position) == 3:
            flag, *rest = position
            if not isinstance(flag, bool):
                raise ValueError("no flag")
            return (flag, *_time_and_id(rest))
        return (False, *_time_and_id(position))
    except (ValueError, TypeError, OverflowError, binascii.Error):
        raise _invalid() from None


def _position(cursor: str) -> Any:
    padded = cursor + "=" * (-len(cursor) % 4)
    return json_parse(base64.urlsafe_b64decode(padded), max_depth=2)


def _time_and_id(position: Any) -> tuple[datetime, UUID]:
    stamp, key = position
    when = datetime.fromisoformat(stamp)
    if when.tzinfo is None or not isinstance(key, str):
        raise ValueError("naive time or no id")
    # In UTC here: a time at the edge of the calendar would overflow in the query.
    return when.astimezone(UTC), UUID(key)


def _invalid() -> ValidationFailed:
    return ValidationFailed([Problem("$.cursor", "is not a valid page cursor")])
