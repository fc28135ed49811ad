"""The provider protocol: what every LLM backend streams to the runner.

A provider turns one model call into an asynchronous stream of small events. The runner
never sees SDK types, so the OpenAI-compatible provider, the offline demo provider and any
future backend are interchangeable. Streams are asynchronous because one event loop per
worker process reads every reply in flight (conversations/engine/streaming.py): a thread per
reply spent most of its CPU handing the GIL around.
"""

from collections.abc import AsyncGenerator
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from conversations import validation
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


StreamEvent = TextDelta | ToolCallStarted | ToolCallArgumentsDelta | UsageReported | Finished


def storable_event(event: StreamEvent) -> StreamEvent:
    """The event with every text made storable, whatever the provider: a model's text
    cannot be refused, so NUL and lone surrogates are repaired (validation.storable_text)
    and ids and names are cut to what their columns hold, before anything is streamed to
    readers, put in the event log or stored. The cut is the same for every event of a
    call, so its arguments still find it."""
    if isinstance(event, TextDelta):
        return TextDelta(storable_text(event.text))
    if isinstance(event, ToolCallStarted):
        return replace(event, call_id=_call_id(event.call_id), name=_tool_name(event.name))
    if isinstance(event, ToolCallArgumentsDelta):
        return ToolCallArgumentsDelta(_call_id(event.call_id), storable_text(event.delta))
    if isinstance(event, UsageReported):
        return replace(event, details=storable_json(event.details))
    return Finished(storable_text(event.reason))


def _call_id(call_id: str) -> str:
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


class Provider(Protocol):
    name: str

    def stream(
        self,
        *,
        model: str,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
    ) -> AsyncGenerator[StreamEvent, None]:
        """Stream one model call (an async generator). `messages` are OpenAI chat messages;
        `tools` are OpenAI function tool definitions (`{"type": "function", "function":
        {...}}`), possibly empty. Raises ProviderError; retries before the first token are
        the provider's."""
        ...


@dataclass
class StreamAccumulator:
    """Collects a stream into the assistant message that gets stored."""

    text: str = ""
    tool_calls: list[dict[str, str]] = field(default_factory=list)
    usage: dict[str, Any] | None = None
    finish_reason: str | None = None

    def add(self, event: StreamEvent) -> None:
        if isinstance(event, TextDelta):
            self.text += event.text
        elif isinstance(event, ToolCallStarted):
            self.tool_calls.append({"id": event.call_id, "name": event.name, "arguments": ""})
        elif isinstance(event, ToolCallArgumentsDelta):
            for call in self.tool_calls:
                if call["id"] == event.call_id:
                    call["arguments"] += event.delta
                    break
        elif isinstance(event, UsageReported):
            self.usage = event.as_dict()
        elif isinstance(event, Finished):
            self.finish_reason = event.reason
