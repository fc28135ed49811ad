"""Stateless chat: the history travels with the client.

The caller sends `{state?, system?, messages}` and gets `{reply, state, state_reset?}`.
Nothing is stored server-side. The state string is opaque to clients:

    Fernet(key from SECRET_KEY).encrypt(zlib(JSON {"version", "provider", "user", "messages"}))

- Leading system messages (the `system` field and the system messages before the first
  other message) are the preamble: sent first on every call, never put in the state.
- System messages after the first non-system message are context events: kept in order.
- The state is encrypted and authenticated (AES with an HMAC, keyed from SECRET_KEY):
  whoever holds it can read nothing of the conversation and cannot forge tool results or
  assistant turns into it. It opens only for the user it was issued to, and only for
  PARLEY_STATELESS_STATE_MAX_AGE_SECONDS after it was issued. Keys listed in
  SECRET_KEY_FALLBACKS still open states issued before a key rotation.
- A state that cannot be used never fails the call: the conversation starts fresh, the
  answer names the reason (`state_reset`) and the server logs one line.
"""

import base64
import json
import logging
import time
import zlib
from dataclasses import dataclass, field
from typing import Any

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from django.conf import settings

from accounts.models import User
from conversations import context, validation
from conversations.context import HistoryMessage
from conversations.engine import streaming
from conversations.engine.llm import provider_get
from conversations.engine.llm.base import GenerationSettings, usage_added
from conversations.engine.model_input_log import model_input_log
from conversations.errors import Problem, ValidationFailed
from conversations.json_input import JsonInputError, json_parse
from conversations.models import Conversation
from conversations.tools import ToolContext, ToolResult, tool_definitions, tool_execute

log = logging.getLogger(__name__)

STATE_VERSION = 2
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
    "wrong_user": "The state was issued to another user.",
    "expired": "The state is older than this server keeps states usable.",
    "too_large": "The state holds more history than this server accepts.",
}


class StateRejected(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(RESET_MESSAGES[reason])
        self.reason = reason


@dataclass
class StatelessReply:
    reply: str | None  # None when the request only added context events
    state: str
    status: str  # completed, or incomplete at the iteration limit or the token limit
    state_reset: str | None = None
    usage: dict[str, int] = field(default_factory=dict)


# --- the state string ------------------------------------------------------------------


def _fernet_key(secret: str | bytes) -> bytes:
    material = secret if isinstance(secret, bytes) else secret.encode()
    kdf = HKDF(algorithm=hashes.SHA256(), length=32, salt=SALT.encode(), info=b"fernet")
    return base64.urlsafe_b64encode(kdf.derive(material))


def _cipher() -> MultiFernet:
    # The current key encrypts; every key (fallbacks after it) decrypts.
    secrets = [settings.SECRET_KEY, *settings.SECRET_KEY_FALLBACKS]
    return MultiFernet([Fernet(_fernet_key(secret)) for secret in secrets])


def state_pack(document: Any) -> str:
    """Encrypt any JSON-able document as a state string (tests use it for bad states)."""
    raw = zlib.compress(json.dumps(document, separators=(",", ":")).encode())
    return _cipher().encrypt(raw).decode()


def state_encode(*, provider: str, user_id: int, messages: list[dict[str, Any]]) -> str:
    return state_pack(
        {"version": STATE_VERSION, "provider": provider, "user": user_id, "messages": messages}
    )


INFLATE_STEP = 256 * 1024


def _inflate(raw: bytes) -> bytes:
    """Decompress without ever holding more than the limit: a small state that inflates
    to gigabytes stops at PARLEY_STATELESS_STATE_MAX_BYTES."""
    limit = settings.PARLEY_STATELESS_STATE_MAX_BYTES
    inflater = zlib.decompressobj()
    # In steps of INFLATE_STEP into one growing buffer: one call asked for the whole limit
    # grows its own output buffer by doubling, which held twice the limit at its peak.
    # The input goes in by slices too, so zlib's copies of what is left to read stay small
    # however large the state itself is.
    out = bytearray()
    view = memoryview(raw)
    for start in range(0, len(raw), INFLATE_STEP):
        pending: bytes | memoryview = view[start : start + INFLATE_STEP]
        while pending and not inflater.eof:
            out += inflater.decompress(pending, INFLATE_STEP)
            if len(out) > limit:
                raise StateRejected("too_large")
            pending = inflater.unconsumed_tail
    while not inflater.eof:  # what zlib still holds of input already read
        piece = inflater.decompress(b"", INFLATE_STEP)
        if not piece:
            break  # a truncated stream: what came out is all there is (the JSON will say)
        out += piece
        if len(out) > limit:
            raise StateRejected("too_large")
    return bytes(out)


def state_decode(state: str, *, provider: str, user_id: int) -> list[dict[str, Any]]:
    """The history in `state`, or StateRejected naming why it cannot be used."""
    if ":" in state:
        # Version 1 states were signed, not encrypted: value:signature.
        raise StateRejected("unsupported_version")
    cipher = _cipher()
    try:
        token = state.encode("ascii")
        raw = cipher.decrypt(token)
        issued = cipher.extract_timestamp(token)
    except (InvalidToken, UnicodeEncodeError, ValueError):
        raise StateRejected("invalid_signature") from None
    if time.time() - issued > settings.PARLEY_STATELESS_STATE_MAX_AGE_SECONDS:
        raise StateRejected("expired")
    try:
        document = json_parse(_inflate(raw))
    except (zlib.error, JsonInputError, UnicodeDecodeError):
        raise StateRejected("invalid_json") from None
    if not isinstance(document, dict):
        raise StateRejected("invalid_json")
    version = document.get("version")
    if isinstance(version, bool) or version != STATE_VERSION:
        raise StateRejected("unsupported_version")
    if document.get("user") != user_id:
        raise StateRejected("wrong_user")
    if document.get("provider") != provider:
        raise StateRejected("provider_mismatch")
    messages: Any = document.get("messages")
    if not _valid_history(messages):
        raise StateRejected("corrupted_messages")
    if len(messages) > settings.PARLEY_STATELESS_STATE_MAX_MESSAGES:
        raise StateRejected("too_large")
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


def _events_append(
    *,
    provider_name: str,
    user: User,
    history: list[dict[str, Any]],
    reset: str | None,
    events: list[dict[str, str]],
) -> StatelessReply:
    if not history:
        why = f" (the state given could not be used: {RESET_MESSAGES[reset]})" if reset else ""
        raise ValidationFailed(
            [
                Problem(
                    "$.messages",
                    "only system messages, and no history for them to follow"
                    f"{why}: leading system messages are a preamble, which is never kept; "
                    "send them with a user message, or as `system`",
                )
            ]
        )
    history = history + [{"role": "system", "content": event["content"]} for event in events]
    return StatelessReply(
        reply=None,
        state=state_encode(provider=provider_name, user_id=user.pk, messages=history),
        status="completed",
        state_reset=reset,
    )


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
    the new state. `messages` are `{role, content}` with role user, assistant or system.

    Only system messages, after some history: context events, appended to the state with
    no model call (the reply is None), as `POST .../events/` does for a stored
    conversation. Only system messages and no history: refused, since leading system
    messages are a preamble, which is never kept."""
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
            history = state_decode(state, provider=provider.name, user_id=user.pk)
        except StateRejected as rejected:
            reset = rejected.reason
            # Never the content: the reason and who sent it.
            log.warning("stateless state reset: %s (user %s)", reset, user.pk)
    if all(message["role"] == "system" for message in messages):
        return _events_append(
            provider_name=provider.name, user=user, history=history, reset=reset, events=messages
        )
    preamble, rest = split_preamble(system, messages)
    history = history + [{"role": m["role"], "content": m["content"]} for m in rest]

    model = settings.PARLEY_MODEL
    # Nothing is stored to hold settings of its own: the server's defaults apply.
    generation = GenerationSettings.effective()
    usage: dict[str, Any] = {}
    # An unsaved conversation: the stateless tools read nothing from it.
    scratch = Conversation(owner=user, tools=STATELESS_TOOLS)
    status = "incomplete"
    reply = ""
    tools = tool_definitions(STATELESS_TOOLS)
    for _iteration in range(settings.PARLEY_RUN_MAX_ITERATIONS):
        model_input = _model_input(preamble, history)
        model_input_log("stateless chat", model=model, messages=model_input, generation=generation)
        accumulated = streaming.stream_collect(
            provider, model=model, messages=model_input, tools=tools, generation=generation
        )
        usage = usage_added(usage, accumulated.usage)
        # Cut at the token limit: the text so far is the reply (incomplete), and a tool
        # call it was writing may be cut mid-arguments, so none is kept or run.
        cut_short = accumulated.finish_reason == "length"
        assistant: dict[str, Any] = {"role": "assistant", "content": accumulated.text}
        if accumulated.tool_calls and not cut_short:
            assistant["tool_calls"] = accumulated.tool_calls
        history.append(assistant)
        reply = accumulated.text
        if cut_short:
            break
        if not accumulated.tool_calls:
            status = "completed"
            break
        for call in accumulated.tool_calls:
            result = stateless_tool_run(call, user=user, scratch=scratch)
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
        state=state_encode(provider=provider.name, user_id=user.pk, messages=history),
        status=status,
        state_reset=reset,
        usage=usage,
    )


def stateless_tool_run(call: dict[str, str], *, user: User, scratch: Conversation) -> ToolResult:
    """One tool call of a reply stored nowhere: only the tools that read no stored
    conversation, against `scratch`, an unsaved one."""
    return tool_execute(
        name=call["name"],
        arguments=call["arguments"],
        context=ToolContext(call_id=call["id"], is_resume=False, conversation=scratch, user=user),
        enabled=STATELESS_TOOLS,
    )
