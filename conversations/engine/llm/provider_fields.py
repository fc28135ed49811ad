"""The extra fields a model server sends with a reply, kept on the stored message.

Servers add facts of their own to a streamed reply: OpenAI's `system_fingerprint` and
`service_tier`, llama.cpp's `timings`, a router's `provider`, vLLM's `stop_reason` on the
choice. Parley does not interpret them, but an operator comparing models, explaining a
bill or reporting a server's bug needs them, so they are kept opaque in
`Message.provider_payload` next to the finish reason.

The server is not trusted to be sensible, so what is kept is bounded: a server that sends a
megabyte of "metadata" with every chunk, a thousand made-up field names or numbers no
column can hold must not bloat the message rows, the exports or the admin. A field that
does not fit is left out whole (a cut JSON value would be a lie, not a shorter truth):

- at most FIELDS_MAX fields per level (the reply's own, its choice's), in the order the
  server first sent them; names of at most NAME_MAX characters;
- each value at most VALUE_MAX_BYTES as JSON, nested at most DEPTH_MAX deep, its numbers
  ones an export can be imported with (finite, integers within 64 bits);
- all of them together at most TOTAL_MAX_BYTES as JSON;
- text made storable (validation.storable_text), as every text from a provider is.
"""

import json
from collections.abc import Mapping
from typing import Any

from conversations.json_input import JsonInputError, json_parse_repaired
from conversations.validation import storable_text

FIELDS_MAX = 32
NAME_MAX = 64
VALUE_MAX_BYTES = 4_096
TOTAL_MAX_BYTES = 16_384
DEPTH_MAX = 8


def fields_bounded(levels: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each level's fields (`{"reply": {...}, "choice": {...}}`) that fit the bounds, made
    storable, the total shared by all levels in order."""
    budget = TOTAL_MAX_BYTES
    bounded: dict[str, dict[str, Any]] = {}
    for level, fields in levels.items():
        kept: dict[str, Any] = {}
        for name, value in fields.items():
            if len(kept) >= FIELDS_MAX:
                break
            if not isinstance(name, str) or not 0 < len(name) <= NAME_MAX:
                continue
            fitted = _fitted(value)
            # A field costs its name and punctuation too: the stored JSON is what grows.
            if fitted is None or (size := fitted[1] + len(name) + 4) > budget:
                continue
            kept[storable_text(name)] = fitted[0]
            budget -= size
        bounded[level] = kept
    return bounded


def _fitted(value: Any) -> tuple[Any, int] | None:
    """(the value made storable, its size as JSON), or None when it does not fit."""
    if isinstance(value, str) and len(value) > VALUE_MAX_BYTES:
        return None  # checked before encoding: a huge text costs nothing to refuse
    try:
        raw = json.dumps(value, allow_nan=False, separators=(",", ":"))
    except (ValueError, TypeError, RecursionError):  # NaN, Infinity, nesting the parser took
        return None
    if len(raw) > VALUE_MAX_BYTES:
        return None
    try:
        # The same reading as an export's import: depth and numbers checked, text repaired.
        return json_parse_repaired(raw, max_depth=DEPTH_MAX), len(raw)
    except JsonInputError:
        return None
