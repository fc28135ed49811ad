"""The ids /openai/v1/ shows: Parley's own UUIDs behind OpenAI-style prefixes, so an id
maps back to its row with no lookup table and says what kind of object it names.

- a conversation: `conv_<uuid hex>`; its plain Parley UUID (the web UI's and /api/v1/'s)
  is accepted too, so a conversation started elsewhere can be continued here;
- a `message` item: `msg_<message uuid hex>`;
- a `function_call` item: `fc_<message uuid hex>_<n>`, the n-th (from 0) tool call of
  the assistant message that made it: one stored message with several calls gives
  several items, each with its own id;
- a `function_call_output` item: `fco_<message uuid hex>` (a stored tool message);
- a `reasoning` item: `rs_<message uuid hex>`, what the model thought before the
  assistant message it belongs to;
- a `compaction` item: `cmp_<message uuid hex>` (a stored summary of earlier turns);
- a response: `resp_<run uuid hex>` (a response is a run);
- a file: `file-<uuid hex>` (OpenAI's files are `file-...`); its plain Parley UUID (the
  one /api/v1/files/ shows) is accepted too.
"""

import re
from dataclasses import dataclass
from enum import StrEnum
from uuid import UUID

CONVERSATION_PREFIX = "conv_"
RESPONSE_PREFIX = "resp_"
FILE_PREFIX = "file-"

_HEX = "[0-9a-f]{32}"
_CONVERSATION = re.compile(f"{CONVERSATION_PREFIX}({_HEX})")
_RESPONSE = re.compile(f"{RESPONSE_PREFIX}({_HEX})")
_FILE = re.compile(f"{FILE_PREFIX}({_HEX})")
# The index has no leading zero, so each item has exactly one spelling.
_ITEM = re.compile(f"(msg|fc|fco|rs|cmp)_({_HEX})(?:_(0|[1-9][0-9]{{0,3}}))?")


class ItemType(StrEnum):
    MESSAGE = "message"
    FUNCTION_CALL = "function_call"
    FUNCTION_CALL_OUTPUT = "function_call_output"
    REASONING = "reasoning"
    COMPACTION = "compaction"


_PREFIXES = {
    ItemType.MESSAGE: "msg",
    ItemType.FUNCTION_CALL: "fc",
    ItemType.FUNCTION_CALL_OUTPUT: "fco",
    ItemType.REASONING: "rs",
    ItemType.COMPACTION: "cmp",
}
_TYPES = {prefix: kind for kind, prefix in _PREFIXES.items()}


@dataclass(frozen=True)
class ItemRef:
    """Which item of which stored message: `index` picks a function call."""

    type: ItemType
    message_id: UUID
    index: int = 0


def conversation_id(key: UUID) -> str:
    return f"{CONVERSATION_PREFIX}{key.hex}"


def conversation_key(raw: str) -> UUID | None:
    """The UUID behind a conversation id in either spelling; None for anything else."""
    return _key(_CONVERSATION, raw)


def _key(pattern: re.Pattern[str], raw: str) -> UUID | None:
    """The UUID behind `raw`: the prefixed spelling `pattern` matches, or a plain UUID."""
    found = pattern.fullmatch(raw)
    if found:
        return UUID(hex=found.group(1))
    try:
        return UUID(raw) if len(raw) == 36 else None
    except ValueError:
        return None


def item_id(ref: ItemRef) -> str:
    text = f"{_PREFIXES[ref.type]}_{ref.message_id.hex}"
    return f"{text}_{ref.index}" if ref.type == ItemType.FUNCTION_CALL else text


def item_ref(raw: str) -> ItemRef | None:
    """The item an id names; None when it is not one of ours."""
    found = _ITEM.fullmatch(raw)
    if not found:
        return None
    prefix, hex_id, index = found.groups()
    kind = _TYPES[prefix]
    # Only a function call has an index, and it always has one.
    if (index is None) == (kind == ItemType.FUNCTION_CALL):
        return None
    return ItemRef(kind, UUID(hex=hex_id), int(index or 0))


def response_id(key: UUID) -> str:
    return f"{RESPONSE_PREFIX}{key.hex}"


def response_key(raw: str) -> UUID | None:
    """The run behind a response id; None for anything else."""
    found = _RESPONSE.fullmatch(raw)
    return UUID(hex=found.group(1)) if found else None


def file_id(key: UUID) -> str:
    return f"{FILE_PREFIX}{key.hex}"


def file_key(raw: str) -> UUID | None:
    """The UUID behind a file id in either spelling; None for anything else."""
    return _key(_FILE, raw)
