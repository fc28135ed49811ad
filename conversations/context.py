"""The model's input, built from stored state. Pure functions: no database, no clock.

    [system_prompt] + history (newest that fits the token budget) + [current draft]

- The system prompt is the preamble: sent fresh on every call, never a history row, so
  changing it applies from the next turn on.
- Context events and draft-edit notices are stored system messages and appear in order.
- The current draft goes last as `[current draft: "..."]`, rebuilt every call and never
  stored, so the model always knows the draft even many turns after an edit.
- What a reasoning model thought (`Message.reasoning`) is never sent back: a message is
  sent as its role, content and tool calls only (HistoryMessage has no other field).
- Truncation drops whole units from the oldest end: an assistant message that called tools
  and all of its results form one unit, because the chat API rejects a tool result
  without its call and a call without its results.

Token estimate: 4 characters per token plus 4 tokens of framing per message. It is
deliberately simple and provider-independent: English averages about 4 characters per
token with OpenAI's tokenizers, and the framing matches their per-message overhead. Set
PARLEY_CONTEXT_TOKENS with headroom below the model's real window.
"""

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

CHARS_PER_TOKEN = 4
MESSAGE_OVERHEAD_TOKENS = 4
MISSING_RESULT = "[no result: this tool call did not complete]"

ChatMessage = dict[str, Any]


class StoredMessage(Protocol):
    @property
    def role(self) -> str: ...
    @property
    def content(self) -> str: ...
    @property
    def tool_calls(self) -> list[dict[str, str]]: ...
    @property
    def tool_call_id(self) -> str: ...


@dataclass(frozen=True)
class HistoryMessage:
    """The fields of a stored message that the model sees."""

    role: str
    content: str = ""
    tool_calls: list[dict[str, str]] = field(default_factory=list)
    tool_call_id: str = ""


def chat_message(message: StoredMessage) -> ChatMessage:
    """A stored message in OpenAI chat format (also the JSONL export's format)."""
    if message.role == "tool":
        return {"role": "tool", "tool_call_id": message.tool_call_id, "content": message.content}
    out: ChatMessage = {"role": message.role}
    if message.content or not message.tool_calls:
        out["content"] = message.content
    if message.tool_calls:
        out["tool_calls"] = [
            {
                "id": call["id"],
                "type": "function",
                "function": {"name": call["name"], "arguments": call["arguments"]},
            }
            for call in message.tool_calls
        ]
    return out


def system_message(content: str) -> ChatMessage:
    return {"role": "system", "content": content}


def current_draft_context(draft: str) -> str:
    return f'[current draft: "{draft}"]'


def estimate_tokens(message: ChatMessage) -> int:
    chars = len(message.get("content") or "") + len(message.get("tool_call_id") or "")
    for call in message.get("tool_calls") or []:
        chars += len(call["id"]) + len(call["function"]["name"])
        chars += len(call["function"]["arguments"])
    return MESSAGE_OVERHEAD_TOKENS + math.ceil(chars / CHARS_PER_TOKEN)


@dataclass
class _OpenGroup:
    unit: list[ChatMessage]
    pending: list[str]
    # System messages stored while the tools ran; sent right after the results.
    deferred: list[list[ChatMessage]] = field(default_factory=list)

    def close(self) -> list[list[ChatMessage]]:
        for call_id in self.pending:
            self.unit.append({"role": "tool", "tool_call_id": call_id, "content": MISSING_RESULT})
        return [self.unit, *self.deferred]


def history_units(history: Sequence[StoredMessage]) -> list[list[ChatMessage]]:
    """Split history into units that truncation keeps or drops whole.

    A tool-calling assistant message and its results are one unit. A result whose call is
    not in the window (it fell off the read tail) is dropped. A call whose result is
    missing (a run stopped mid-tools) gets a placeholder result so the API accepts it.
    """
    units: list[list[ChatMessage]] = []
    group: _OpenGroup | None = None
    for message in history:
        if message.role == "assistant" and not message.content and not message.tool_calls:
            # A reply stopped while the model was still thinking said nothing: its
            # thoughts are never sent back, and an empty turn some servers refuse.
            continue
        if message.role == "tool":
            if group is not None and message.tool_call_id in group.pending:
                group.unit.append(chat_message(message))
                group.pending.remove(message.tool_call_id)
                if not group.pending:
                    units += group.close()
                    group = None
            continue
        if group is not None:
            if message.role == "system":
                group.deferred.append([chat_message(message)])
                continue
            units += group.close()
            group = None
        if message.role == "assistant" and message.tool_calls:
            group = _OpenGroup(
                unit=[chat_message(message)], pending=[c["id"] for c in message.tool_calls]
            )
        else:
            units.append([chat_message(message)])
    if group is not None:
        units += group.close()
    return units


def build_model_input(
    *,
    system_prompt: str,
    history: Sequence[StoredMessage],
    draft: str,
    token_budget: int,
) -> list[ChatMessage]:
    """The messages for the next model call.

    Keeps the newest units that fit in `token_budget` minus the preamble and trailing
    context; the newest unit is always kept, so the latest user message is never dropped.
    """
    head = [system_message(system_prompt)] if system_prompt else []
    tail = [system_message(current_draft_context(draft))] if draft else []
    remaining = token_budget - sum(estimate_tokens(m) for m in head + tail)
    kept: list[list[ChatMessage]] = []
    for unit in reversed(history_units(history)):
        cost = sum(estimate_tokens(m) for m in unit)
        if kept and cost > remaining:
            break
        kept.append(unit)
        remaining -= cost
    body = [message for unit in reversed(kept) for message in unit]
    return head + body + tail
