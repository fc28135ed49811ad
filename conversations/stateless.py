"""Stateless chat (seed 000's ChatWithState): the history travels with the client.

The caller sends `{state?, system?, messages}` and gets `{reply, state, state_reset?}`.
Nothing is stored server-side. The state string is opaque to clients:

    Signer(salt).sign(base64url(zlib(JSON {"version", "provider", "messages"})))

- Leading system messages (the `system` field and the system messages before the first
  other message) are the preamble: sent first on every call, never put in the state.
- System messages after the first non-system message are context events: kept in order.
- The state is signed with SECRET_KEY, so a client can read nothing useful from it and
  cannot forge tool results or assistant turns into it.
- A state that cannot be used never fails the call: the conversation starts fresh and the
  answer names the reason (`state_reset`).
"""

import base64
import binascii
import json
import zlib
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.core import signing

from accounts.models import User
from conversations import context, streaming, validation
from conversations.context import HistoryMessage
from conversations.errors import ValidationFailed
from conversations.llm import provider_get
from conversations.llm.tools import ToolContext, tool_definitions, tool_execute
from conversations.models import Conversation

STATE_VERSION = 1
SALT = "parley.stateless-chat.state"
# Tools that need no stored conversation; the others (draft, search) have nothing to act on.
STATELESS_TOOLS = ["calculator", "current_time"]
ROLES = frozenset({"user", "assistant", "tool", "system"})

# Why a state was discarded; each is a `state_reset.reason`.
RESET_MESSAGES = {
    "invalid_signature": "The state was not issued by this server or was altered.",
    "invalid_json": "The state's content is not valid JSON.",
    "unsupported_version": "The state was written in a format version this server cannot read.",
    "provider_mismatch": "The state belongs to another model provider.",
    "corrupted_messages": "The state's messages are not a valid conversation.",
}


class StateRejected(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(RESET_MESSAGES[reason])
        self.reason = reason


@dataclass
class StatelessReply:
    reply: str
    state: str
    status: str  # completed, or incomplete at the iteration limit
    state_reset: str | None = None
    usage: dict[str, int] = field(default_factory=dict)


# --- the state string ------------------------------------------------------------------


def _signer() -> signing.Signer:
    return signing.Signer(salt=SALT)


def state_pack(document: Any) -> str:
    """Sign any JSON-able document as a state string (tests use it to make bad states)."""
    raw = zlib.compress(json.dumps(document, separators=(",", ":")).encode())
    return _signer().sign(base64.urlsafe_b64encode(raw).decode().rstrip("="))


def state_encode(*, provider: str, messages: list[dict[str, Any]]) -> str:
    return state_pack({"version": STATE_VERSION, "provider": provider, "messages": messages})


def state_decode(state: str, *, provider: str) -> list[dict[str, Any]]:
    """The history in `state`, or StateRejected naming why it cannot be used."""
    try:
        packed = _signer().unsign(state)
    except signing.BadSignature:
        raise StateRejected("invalid_signature") from None
    try:
        raw = zlib.decompress(base64.urlsafe_b64decode(packed + "=" * (-len(packed) % 4)))
        document = json.loads(raw)
    except (binascii.Error, zlib.error, ValueError):
        raise StateRejected("invalid_json") from None
    if not isinstance(document, dict):
        raise StateRejected("invalid_json")
    version = document.get("version")
    if isinstance(version, bool) or version != STATE_VERSION:
        raise StateRejected("unsupported_version")
    if document.get("provider") != provider:
        raise StateRejected("provider_mismatch")
    messages: Any = document.get("messages")
    if not _valid_history(messages):
        raise StateRejected("corrupted_messages")
    result: list[dict[str, Any]] = messages
    return result


def _valid_history(messages: Any) -> bool:
    """Well-formed messages in which every tool result answers an earlier call."""
    if not isinstance(messages, list):
        return False
    calls: set[str] = set()
    for message in messages:
        if not isinstance(message, dict) or message.get("role") not in ROLES:
            return False
        if not isinstance(message.get("content"), str):
            return False
        tool_calls = message.get("tool_calls", [])
        if not isinstance(tool_calls, list) or (tool_calls and message["role"] != "assistant"):
            return False
        for call in tool_calls:
            if not isinstance(call, dict) or not all(
                isinstance(call.get(key), str) for key in ("id", "name", "arguments")
            ):
                return False
            calls.add(call["id"])
        if message["role"] == "tool" and message.get("tool_call_id") not in calls:
            return False
    return True


# --- one call --------------------------------------------------------------------------


def split_preamble(
    system: str, messages: list[dict[str, str]]
) -> tuple[list[str], list[dict[str, str]]]:
    """(preamble texts, the rest): leading system messages are the preamble."""
    preamble = [system] if system else []
    index = 0
    while index < len(messages) and messages[index]["role"] == "system":
        preamble.append(messages[index]["content"])
        index += 1
    return preamble, messages[index:]


def _history(messages: list[dict[str, Any]]) -> list[HistoryMessage]:
    return [
        HistoryMessage(
            role=m["role"],
            content=m["content"],
            tool_calls=m.get("tool_calls", []),
            tool_call_id=m.get("tool_call_id", ""),
        )
        for m in messages
    ]


def _model_input(preamble: list[str], history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    head = [context.system_message(text) for text in preamble]
    budget = settings.PARLEY_CONTEXT_TOKENS - sum(context.estimate_tokens(m) for m in head)
    body = context.build_model_input(
        system_prompt="", history=_history(history), draft="", token_budget=budget
    )
    return head + body


def stateless_chat(
    *, user: User, state: str | None, system: str, messages: list[dict[str, str]]
) -> StatelessReply:
    """Run the tool loop over the state's history plus `messages` and return the reply and
    the new state. `messages` are `{role, content}` with role user, assistant or system and
    at least one non-system message (the caller validates that)."""
    problems = validation.system_prompt_problems(system, path="$.system")
    for index, message in enumerate(messages):
        problems += validation.content_problems(
            message["content"], path=f"$.messages[{index}].content"
        )
    if problems:
        raise ValidationFailed(problems)
    provider = provider_get()
    history: list[dict[str, Any]] = []
    reset = None
    if state:
        try:
            history = state_decode(state, provider=provider.name)
        except StateRejected as rejected:
            reset = rejected.reason
    preamble, rest = split_preamble(system, messages)
    history = history + [{"role": m["role"], "content": m["content"]} for m in rest]

    model = settings.PARLEY_MODEL
    usage: dict[str, int] = {}
    # An unsaved conversation: the stateless tools read nothing from it.
    scratch = Conversation(owner=user, tools=STATELESS_TOOLS)
    status = "incomplete"
    reply = ""
    for _iteration in range(settings.PARLEY_RUN_MAX_ITERATIONS):
        accumulated = streaming.stream_collect(
            provider,
            model=model,
            messages=_model_input(preamble, history),
            tools=tool_definitions(STATELESS_TOOLS),
        )
        for key, value in (accumulated.usage or {}).items():
            if isinstance(value, int) and not isinstance(value, bool):
                usage[key] = usage.get(key, 0) + value
        assistant: dict[str, Any] = {"role": "assistant", "content": accumulated.text}
        if accumulated.tool_calls:
            assistant["tool_calls"] = accumulated.tool_calls
        history.append(assistant)
        reply = accumulated.text
        if not accumulated.tool_calls:
            status = "completed"
            break
        for call in accumulated.tool_calls:
            result = tool_execute(
                name=call["name"],
                arguments=call["arguments"],
                context=ToolContext(
                    call_id=call["id"], is_resume=False, conversation=scratch, user=user
                ),
                enabled=STATELESS_TOOLS,
            )
            history.append(
                {
                    "role": "tool",
                    "tool_call_id": call["id"],
                    "name": call["name"],
                    "content": result.output,
                }
            )
    return StatelessReply(
        reply=reply,
        state=state_encode(provider=provider.name, messages=history),
        status=status,
        state_reset=reset,
        usage=usage,
    )
