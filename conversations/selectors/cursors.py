"""Keyset page cursors: an opaque, URL-safe encoding of the last row a page showed, as
(time, id). Clients pass them back untouched; a cursor that does not decode is a 400."""

import base64
import binascii
import json
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

from conversations.errors import Problem, ValidationFailed
from conversations.json_input import json_parse


def cursor_encode(position: list[Any]) -> str:
    """`[time in ISO 8601, id]`, or a list of the caller's own meaning (an empty one)."""
    return base64.urlsafe_b64encode(json.dumps(position).encode()).decode().rstrip("=")


def cursor_decode(cursor: str) -> tuple[datetime, UUID] | None:
    """The (time, id) a cursor holds, or None for an empty position; ValidationFailed for
    anything else."""
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        position = json_parse(base64.urlsafe_b64decode(padded), max_depth=2)
        if position == []:
            return None
        stamp, key = position
        when = datetime.fromisoformat(stamp)
        if when.tzinfo is None or not isinstance(key, str):
            raise ValueError("naive time or no id")
        # In UTC here: a time at the edge of the calendar would overflow in the query.
        return when.astimezone(UTC), UUID(key)
    except (ValueError, TypeError, OverflowError, binascii.Error):
        raise ValidationFailed([Problem("$.cursor", "is not a valid page cursor")]) from None
