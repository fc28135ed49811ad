"""Stateless chat: the history travels with the client.

The caller sends `{state?, system?, messages}` and gets `{reply, state, draft,
state_reset?}`. Nothing is stored server-side: the reply comes from the one loop
(engine/loop.py) writing to a run kept nowhere (engine/unstored.py), with every tool a
conversation has by default. The state string is opaque to clients:

    Fernet(key from SECRET_KEY).encrypt(zlib(JSON {"version", "provider", "user", "messages",
                                                    "draft"?}))

- Leading system messages (the `system` field and the system messages before the first
  other message) are the preamble: sent first on every call, never put in the state.
- System messages after the first non-system message are context events: kept in order.
- The state is encrypted and authenticated (AES with an HMAC, keyed from SECRET_KEY):
  whoever holds it can read nothing of the conversation and cannot forge tool results or
  assistant turns into it. It opens only for the user it was issued to, and only for
  PARLEY_STATELESS_STATE_MAX_AGE_SECONDS after it was issued. Keys listed in
  SECRET_KEY_FALLBACKS still open states issued before a key rotation.
- The draft `update_draft` writes travels in the state too, and each call's model input
  ends with it, as a stored conversation's does.
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
from conversations.engine.llm import provider_get
from conversations.engine.llm.base import ProviderError
from conversations.engine.unstored import (
    UnstoredRun,
    history_message,
    unstored_run,
    unstored_run_go,
)
from conversations.errors import Problem, ValidationFailed
from conversations.json_input import JsonInputError, json_parse
from conversations.models import Run
from conversations.tool_pairing import OpenCalls
from conversations.tools import tool_default_names, tool_names_problems

log = logging.getLogger(__name__)

STATE_VERSION = 2
SALT = "parley.stateless-chat.state"
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
class State:
    """What a state string carries."""

    messages: list[dict[str, Any]] = field(default_factory=list)
    draft: str = ""


@dataclass
class StatelessReply:
    reply: str | None  # None when the request only added context events
    state: str
    status: str  # completed, or incomplete at the iteration limit or the token limit
    draft: str = ""
    state_reset: str | None = None
    usage: dict[str, int] = field(default_factory=dict)
    # Why an incomplete reply stopped: `{code, message}`, as a stored run's error.
    error: dict[str, str] | None = None


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


def state_encode(
    *, provider: str, user_id: int, messages: list[dict[str, Any]], draft: str = ""
) -> str:
    document: dict[str, Any] = {
        "version": STATE_VERSION,
        "provider": provider,
        "user": user_id,
        "messages": messages,
    }
    if draft:
        document["draft"] = draft
    return state_pack(document)


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


def state_decode(state: str, *, provider: str, user_id: int) -> State:
    """The history and draft in `state`, or StateRejected naming why it cannot be used."""
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
    draft = document.get("draft", "")
    if not isinstance(draft, str) or validation.draft_problems(draft):
        raise StateRejected("corrupted_messages")
    return State(messages=messages, draft=draft)


def _valid_history(messages: Any) -> bool:
    """Well-formed messages that keep the tool-call rule of every stored path
    (tool_pairing.py): each tool result answers an earlier call not yet answered."""
    if not isinstance(messages, list):
        return False
    calls = OpenCalls()
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
        answered = message.get("tool_call_id")
        if answered is not None and not isinstance(answered, str):
            return False
        if calls.read(
            role=message["role"],
            call_ids=[call["id"] for call in tool_calls],
            tool_call_id=answered,
            path="$",
        ):
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


def _events_append(
    *,
    provider_name: str,
    user: User,
    state: State,
    reset: str | None,
    events: list[dict[str, str]],
) -> StatelessReply:
    if not state.messages:
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
    history = state.messages + [{"role": "system", "content": e["content"]} for e in events]
    return StatelessReply(
        reply=None,
        state=state_encode(
            provider=provider_name, user_id=user.pk, messages=history, draft=state.draft
        ),
        status="completed",
        draft=state.draft,
        state_reset=reset,
    )


def stateless_chat(
    *,
    user: User,
    state: str | None,
    system: str,
    messages: list[dict[str, str]],
    tools: list[str] | None = None,
) -> StatelessReply:
    """Run the tool loop over the state's history plus `messages` and return the reply and
    the new state. `messages` are `{role, content}` with role user, assistant or system;
    `tools` are those the model may call (None: those a new conversation has).

    Only system messages, after some history: context events, appended to the state with
    no model call (the reply is None), as `POST .../events/` does for a stored
    conversation. Only system messages and no history: refused, since leading system
    messages are a preamble, which is never kept."""
    problems = validation.system_prompt_problems(system, path="$.system")
    if tools is not None:
        problems += tool_names_problems(tools, user=user)
    for index, message in enumerate(messages):
        problems += validation.content_problems(
            message["content"], path=f"$.messages[{index}].content"
        )
    if problems:
        raise ValidationFailed(problems)
    provider = provider_get()
    state_in = State()
    reset = None
    if state:
        try:
            state_in = state_decode(state, provider=provider.name, user_id=user.pk)
        except StateRejected as rejected:
            reset = rejected.reason
            # Never the content: the reason and who sent it.
            log.warning("stateless state reset: %s (user %s)", reset, user.pk)
    if all(message["role"] == "system" for message in messages):
        return _events_append(
            provider_name=provider.name, user=user, state=state_in, reset=reset, events=messages
        )
    preamble, rest = split_preamble(system, messages)
    history = state_in.messages + [{"role": m["role"], "content": m["content"]} for m in rest]
    # Nothing is stored to hold settings of its own: the server's defaults apply, and
    # the tools asked for or else those a new conversation has.
    run, scratch = unstored_run(
        owner=user,
        model=settings.PARLEY_MODEL,
        tools=tool_default_names() if tools is None else tools,
        draft=state_in.draft,
    )
    sink = UnstoredRun(
        run=run,
        conversation=scratch,
        head=[context.system_message(text) for text in preamble],
        before=[history_message(m) for m in history],
    )
    unstored_run_go(sink, provider=provider, label="stateless chat")
    if run.status == Run.Status.FAILED and run.error is not None:
        # The model call failed: there is no reply to give and no state worth keeping.
        raise ProviderError(run.error["code"], run.error["message"])
    return StatelessReply(
        reply=sink.reply_text(),
        state=state_encode(
            provider=provider.name,
            user_id=user.pk,
            messages=history + sink.kept,
            draft=scratch.draft,
        ),
        status=run.status,
        draft=scratch.draft,
        state_reset=reset,
        usage=run.usage,
        error=run.error,
    )
