"""The provider protocol: what every LLM backend streams to the runner.

A provider turns one model call into an asynchronous stream of small events. The runner
never sees SDK types, so the OpenAI-compatible provider, the offline demo provider and any
future backend are interchangeable. Streams are asynchronous because one event loop per
worker process reads every reply in flight (conversations/engine/streaming.py): a thread per
reply spent most of its CPU handing the GIL around.
"""

import time
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from django.conf import settings

from conversations import validation
from conversations.engine.llm.provider_fields import fields_bounded
from conversations.errors import MODEL_CALL_FAILED, ParleyError
from conversations.validation import storable_json, storable_text


@dataclass(frozen=True)
class TextDelta:
    text: str


@dataclass(frozen=True)
class ToolCallStarted:
    """A new tool call. `call_id` is unique within the response (generated if the server
    sent none); `index` is the call's position in the assistant message."""

    index: int
    call_id: str
    name: str


@dataclass(frozen=True)
class ToolCallArgumentsDelta:
    call_id: str
    delta: str


@dataclass(frozen=True)
class UsageReported:
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    details: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        usage: dict[str, Any] = {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.total_tokens,
        }
        usage.update(self.details)
        return usage


@dataclass(frozen=True)
class Finished:
    """The last event of a successful stream: `stop`, `tool_calls`, `length`, ..."""

    reason: str


@dataclass(frozen=True)
class ReasoningDelta:
    """A piece of what a reasoning model thinks before it answers. Shown to the user and
    stored with the reply, never sent back to the model."""

    text: str


@dataclass(frozen=True)
class ProviderFields:
    """Every extra field the server sent so far, merged over the stream's chunks (later
    chunks win): `reply` from the chunks themselves, `choice` from their choice. Each
    event replaces the previous one; kept opaque in the message's provider_payload."""

    reply: dict[str, Any] = field(default_factory=dict)
    choice: dict[str, Any] = field(default_factory=dict)

    def as_payload(self) -> dict[str, Any]:
        payload = dict(self.reply)
        if self.choice:
            payload["choice"] = dict(self.choice)
        return payload


StreamEvent = (
    TextDelta
    | ToolCallStarted
    | ToolCallArgumentsDelta
    | UsageReported
    | Finished
    | ReasoningDelta
    | ProviderFields
)


def storable_event(event: StreamEvent) -> StreamEvent:
    """The event with every text made storable, whatever the provider: a model's text
    cannot be refused, so NUL and lone surrogates are repaired (validation.storable_text)
    and ids and names are cut to what their columns hold, before anything is streamed to
    readers, put in the event log or stored. The cut is the same for every event of a
    call, so its arguments still find it."""
    if isinstance(event, TextDelta):
        return TextDelta(storable_text(event.text))
    if isinstance(event, ToolCallStarted):
        return replace(event, call_id=call_id_storable(event.call_id), name=_tool_name(event.name))
    if isinstance(event, ToolCallArgumentsDelta):
        return ToolCallArgumentsDelta(call_id_storable(event.call_id), storable_text(event.delta))
    if isinstance(event, UsageReported):
        return replace(event, details=storable_json(event.details))
    if isinstance(event, ReasoningDelta):
        return ReasoningDelta(storable_text(event.text))
    if isinstance(event, ProviderFields):
        # Also bounded in size: the server decides what it sends (provider_fields.py).
        bounded = fields_bounded({"reply": event.reply, "choice": event.choice})
        return ProviderFields(reply=bounded["reply"], choice=bounded["choice"])
    return Finished(storable_text(event.reason))


def call_id_storable(call_id: str) -> str:
    """A call id as it is streamed and stored: storable text, cut to its column."""
    return storable_text(call_id)[: validation.TOOL_CALL_ID_MAX]


def _tool_name(name: str) -> str:
    return storable_text(name)[: validation.TOOL_NAME_MAX]


class ProviderError(Exception):
    """A model call failed. `code` becomes the run's error code.

    Codes: provider_timeout, provider_error, rate_limited, context_length_exceeded,
    authentication_failed, bad_request, connection_error.
    """

    def __init__(self, code: str, message: str) -> None:
        # The message may quote the model server, and it is stored with the failed run.
        message = storable_text(message)
        super().__init__(message)
        self.code = code
        self.message = message

    def for_client(self) -> ParleyError:
        """This failure as a door answers a call made while the client waits (stateless
        chat, a compaction): `model_call_failed`, with the provider's code as the reason."""
        return ParleyError(
            MODEL_CALL_FAILED, f"The model call failed: {self.message}", {"reason": self.code}
        )


@dataclass(frozen=True)
class GenerationSettings:
    """What one model call may do: at most `max_output_tokens` tokens of reply, sampled at
    `temperature` (None: the provider's own default, nothing is sent).

    Every call carries a token limit, so no reply runs on unbounded, costing money and
    holding a worker, when a model loops or rambles."""

    max_output_tokens: int
    temperature: float | None = None
    # Sent only when a run asks for them (a response of the OpenAI-compatible API): None
    # leaves the model server's own default, so conversations' requests stay as they were.
    top_p: float | None = None
    # "auto", "none", "required" or `{"type": "function", "function": {"name": ...}}`.
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    # Sent only to the models that take it (PARLEY_REASONING_EFFORT_MODELS).
    reasoning_effort: str | None = None

    @classmethod
    def effective(
        cls,
        *,
        temperature: float | None = None,
        max_output_tokens: int | None = None,
        overrides: dict[str, Any] | None = None,
    ) -> "GenerationSettings":
        """A conversation's own settings, else the server's defaults; a run's `overrides`
        (Run.generation) win over both. The limit never goes above the server's cap, even
        for a conversation saved before the cap was lowered."""
        overrides = overrides or {}
        if overrides.get("temperature") is not None:
            temperature = overrides["temperature"]
        limit = (
            overrides.get("max_output_tokens")
            or max_output_tokens
            or settings.PARLEY_DEFAULT_MAX_OUTPUT_TOKENS
        )
        if temperature is None:
            temperature = settings.PARLEY_DEFAULT_TEMPERATURE
        return cls(
            max_output_tokens=max(1, min(limit, settings.PARLEY_MAX_OUTPUT_TOKENS)),
            temperature=temperature,
            top_p=overrides.get("top_p"),
            tool_choice=overrides.get("tool_choice"),
            parallel_tool_calls=overrides.get("parallel_tool_calls"),
            presence_penalty=overrides.get("presence_penalty"),
            frequency_penalty=overrides.get("frequency_penalty"),
            reasoning_effort=overrides.get("reasoning_effort"),
        )


class Provider(Protocol):
    name: str

    def stream(
        self,
        *,
        model: str,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        generation: GenerationSettings | None = None,
    ) -> AsyncGenerator[StreamEvent, None]:
        """Stream one model call (an async generator). `messages` are OpenAI chat messages;
        `tools` are OpenAI function tool definitions (`{"type": "function", "function":
        {...}}`), possibly empty; `generation` limits the reply (None: the server's
        defaults). A reply cut at the token limit ends with `Finished("length")`. Raises
        ProviderError; retries before the first token are the provider's."""
        ...


@dataclass
class StreamAccumulator:
    """Collects a stream into the assistant message that gets stored."""

    text: str = ""
    tool_calls: list[dict[str, str]] = field(default_factory=list)
    usage: dict[str, Any] | None = None
    finish_reason: str | None = None
    reasoning: str = ""
    # How long the model thought: from its first reasoning delta to the first piece of its
    # answer (text or a tool call); without an answer yet, to its latest reasoning delta.
    reasoning_ms: int | None = None
    provider_fields: ProviderFields = field(default_factory=ProviderFields)
    clock: Callable[[], float] = field(default=time.monotonic, repr=False, compare=False)
    _thinking_since: float | None = field(default=None, init=False, repr=False)
    _answered: bool = field(default=False, init=False, repr=False)

    def add(self, event: StreamEvent) -> None:
        if isinstance(event, TextDelta):
            self.text += event.text
            self._answer_started()
        elif isinstance(event, ToolCallStarted):
            self.tool_calls.append({"id": event.call_id, "name": event.name, "arguments": ""})
            self._answer_started()
        elif isinstance(event, ToolCallArgumentsDelta):
            for call in self.tool_calls:
                if call["id"] == event.call_id:
                    call["arguments"] += event.delta
                    break
        elif isinstance(event, ReasoningDelta):
            self.reasoning += event.text
            if not self._answered:
                now = self.clock()
                if self._thinking_since is None:
                    self._thinking_since = now
                self.reasoning_ms = _milliseconds(now - self._thinking_since)
        elif isinstance(event, ProviderFields):
            self.provider_fields = event
        elif isinstance(event, UsageReported):
            self.usage = event.as_dict()
        elif isinstance(event, Finished):
            self.finish_reason = event.reason

    def _answer_started(self) -> None:
        if self._thinking_since is not None and not self._answered:
            self._answered = True
            self.reasoning_ms = _milliseconds(self.clock() - self._thinking_since)

    def provider_payload(self, finish_reason: str | None) -> dict[str, Any]:
        """The stored message's `provider_payload`: the server's extra fields, and the
        finish reason (ours wins over a field the server happened to call that)."""
        return {**self.provider_fields.as_payload(), "finish_reason": finish_reason}


def _milliseconds(seconds: float) -> int:
    return min(max(0, round(seconds * 1000)), REASONING_MS_MAX)


# What the column holds (a PostgreSQL integer): about 24 days, far past any real reply.
REASONING_MS_MAX = 2**31 - 1


def usage_added(totals: dict[str, Any] | None, usage: dict[str, Any] | None) -> dict[str, Any]:
    """`totals` with a model call's token counts added, key by key (only whole numbers:
    a server's other usage fields are not summable), and so within the breakdowns
    (`prompt_tokens_details`, `completion_tokens_details`: cached and reasoning tokens)."""
    added = dict(totals or {})
    for key, value in (usage or {}).items():
        if isinstance(value, int) and not isinstance(value, bool):
            added[key] = added.get(key, 0) + value
        elif isinstance(value, dict) and key.endswith("_details"):
            before = added.get(key)
            added[key] = usage_added(before if isinstance(before, dict) else None, value)
    return added
