"""The OpenAI-compatible provider: OpenAI, vLLM, Ollama, llama.cpp ... via the official SDK.

The SDK's own retries are off (`max_retries=0`): a streamed call may only be retried before
its first event reached the runner, and only this module knows when that happened.
"""

from __future__ import annotations

import email.utils
import json
import logging
import random
import re
import time
import uuid
from collections.abc import Generator, Iterator
from dataclasses import dataclass, field
from typing import Any, cast

import openai
from django.conf import settings
from openai.types.chat import (
    ChatCompletionChunk,
    ChatCompletionMessageParam,
    ChatCompletionToolUnionParam,
)
from openai.types.chat.chat_completion_chunk import ChoiceDeltaToolCall
from openai.types.completion_usage import CompletionUsage

from conversations.llm.base import (
    Finished,
    ProviderError,
    StreamEvent,
    TextDelta,
    ToolCallArgumentsDelta,
    ToolCallStarted,
    UsageReported,
)

logger = logging.getLogger(__name__)

# Upstream error text is shown to users: keep it short and strip anything key-like.
_MAX_DETAIL_CHARS = 300
_SECRET_PATTERN = re.compile(r"(sk-[\w*\-]+|Bearer\s+\S+)", re.IGNORECASE)
# OpenAI and vLLM say "maximum context length", llama.cpp "exceed_context_size".
_CONTEXT_LENGTH_HINTS = (
    "context_length_exceeded",
    "maximum context length",
    "exceed_context_size",
    "context size",
)


class OpenAIProvider:
    name = "openai"

    def __init__(
        self,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        timeout: float | None = None,
        max_retries: int | None = None,
        backoff_base: float = 0.5,
        backoff_max: float = 8.0,
        retry_after_max: float = 20.0,
    ) -> None:
        self.timeout = float(settings.OPENAI_TIMEOUT_SECONDS if timeout is None else timeout)
        self.max_retries = settings.OPENAI_MAX_RETRIES if max_retries is None else max_retries
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self.retry_after_max = retry_after_max
        # One client per provider: its connection pool is reused across calls.
        self.client = openai.OpenAI(
            api_key=api_key or settings.OPENAI_API_KEY,
            base_url=base_url or settings.OPENAI_BASE_URL or None,
            timeout=self.timeout,
            max_retries=0,
        )

    def stream(
        self,
        *,
        model: str,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
    ) -> Generator[StreamEvent, None, None]:
        attempt = 0
        while True:
            translator = _ChunkTranslator()
            started = False  # an event reached the caller: from then on, never retry
            try:
                with self._open(model, messages, tools) as chunks:
                    for chunk in chunks:
                        for event in translator.feed(chunk):
                            started = True
                            yield event
                yield from translator.finish()
                return
            except openai.APIError as error:
                if translator.finish_reason is not None and isinstance(
                    error, openai.APIConnectionError
                ):
                    # Only the usage chunk or [DONE] was lost: the reply itself is complete.
                    logger.warning("Stream broke after its finish reason; keeping the reply")
                    yield from translator.finish()
                    return
                if started or attempt >= self.max_retries or not _is_retryable(error):
                    raise _provider_error(error, started=started, timeout=self.timeout) from error
                delay = self._retry_delay(attempt, error)
                attempt += 1
                logger.warning(
                    "Model call failed (%s); retry %d of %d in %.2fs",
                    _describe(error),
                    attempt,
                    self.max_retries,
                    delay,
                )
                time.sleep(delay)
            except json.JSONDecodeError as error:
                message = "The model server sent a reply that could not be read."
                raise ProviderError("provider_error", message) from error

    def _open(
        self, model: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]]
    ) -> openai.Stream[ChatCompletionChunk]:
        # Messages and tools are already in OpenAI's wire format; the casts only name that.
        return self.client.chat.completions.create(
            model=model,
            messages=cast(list[ChatCompletionMessageParam], messages),
            tools=cast(list[ChatCompletionToolUnionParam], tools) if tools else openai.omit,
            stream=True,
            stream_options={"include_usage": True},
        )

    def _retry_delay(self, attempt: int, error: openai.APIError) -> float:
        retry_after = _retry_after_seconds(error)
        if retry_after is not None:
            return min(max(retry_after, 0.0), self.retry_after_max)
        delay = min(self.backoff_base * 2**attempt, self.backoff_max)
        return delay * (1 + random.uniform(0, 0.25))  # jitter spreads out concurrent retries


@dataclass
class _PendingCall:
    server_id: str | None
    name: str = ""
    call_id: str = ""  # set when ToolCallStarted is emitted
    buffered_arguments: list[str] = field(default_factory=list)


class _ChunkTranslator:
    """Turns SDK chunks into protocol events, assembling tool calls by index.

    A call is announced once its name is known; argument pieces that come earlier are held
    back. A new id at an index that already has a call starts a new call (some servers put
    parallel calls at one index). Usage and the finish reason are held until the end so
    `Finished` is always last, whatever order the server used.
    """

    def __init__(self) -> None:
        self._calls_by_index: dict[int, _PendingCall] = {}
        self._announced = 0
        self._last_index = 0
        self._usage: UsageReported | None = None
        self.finish_reason: str | None = None

    def feed(self, chunk: ChatCompletionChunk) -> Iterator[StreamEvent]:
        if chunk.usage is not None:
            self._usage = _usage_event(chunk.usage)
        for choice in chunk.choices or []:
            if choice.index != 0:  # we never ask for n > 1
                continue
            delta = choice.delta
            if delta is not None:
                if delta.content:
                    yield TextDelta(delta.content)
                if delta.refusal:  # a refusal is what the user should read instead
                    yield TextDelta(delta.refusal)
                for piece in delta.tool_calls or []:
                    yield from self._feed_tool_call(piece)
            if choice.finish_reason:
                self.finish_reason = choice.finish_reason

    def finish(self) -> Iterator[StreamEvent]:
        unnamed = [c for c in self._calls_by_index.values() if not c.call_id]
        if unnamed:
            logger.warning("Dropped %d tool call(s) the server never named", len(unnamed))
        if self.finish_reason is None:
            message = "The model server's reply stopped early (the stream ended unfinished)."
            raise ProviderError("connection_error", message)
        if self._usage is not None:
            yield self._usage
        yield Finished(self.finish_reason)

    def _feed_tool_call(self, piece: ChoiceDeltaToolCall) -> Iterator[StreamEvent]:
        # Tolerate servers that omit `index`: continue the latest call.
        index = piece.index if isinstance(getattr(piece, "index", None), int) else self._last_index
        self._last_index = index
        call = self._calls_by_index.get(index)
        if call is None or (piece.id and call.server_id and piece.id != call.server_id):
            call = self._calls_by_index[index] = _PendingCall(server_id=piece.id)
        elif piece.id and not call.server_id and not call.call_id:
            call.server_id = piece.id
        function = piece.function
        if function is not None and function.name and not call.call_id:
            call.name += function.name
        arguments = function.arguments if function is not None else None
        if call.call_id:
            if arguments:
                yield ToolCallArgumentsDelta(call.call_id, arguments)
            return
        if arguments:
            call.buffered_arguments.append(arguments)
        if call.name:
            call.call_id = call.server_id or f"call_{uuid.uuid4().hex}"
            yield ToolCallStarted(index=self._announced, call_id=call.call_id, name=call.name)
            self._announced += 1
            if call.buffered_arguments:
                yield ToolCallArgumentsDelta(call.call_id, "".join(call.buffered_arguments))
                call.buffered_arguments.clear()


def _usage_event(usage: CompletionUsage) -> UsageReported:
    totals = {"prompt_tokens", "completion_tokens", "total_tokens"}
    details = {
        key: value
        for key, value in usage.model_dump(mode="json", exclude_none=True).items()
        if key not in totals
    }
    return UsageReported(
        prompt_tokens=usage.prompt_tokens or 0,
        completion_tokens=usage.completion_tokens or 0,
        total_tokens=usage.total_tokens or 0,
        details=details,
    )


def _is_retryable(error: openai.APIError) -> bool:
    if isinstance(error, openai.APIConnectionError):  # includes timeouts
        return True
    if isinstance(error, openai.APIStatusError):
        return error.status_code == 429 or error.status_code >= 500
    return False


def _retry_after_seconds(error: openai.APIError) -> float | None:
    if not isinstance(error, openai.APIStatusError):
        return None
    headers = error.response.headers
    for header, divisor in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        value = headers.get(header)
        if value is None:
            continue
        try:
            return float(value) / divisor
        except ValueError:
            parsed = email.utils.parsedate_tz(value)  # Retry-After may be an HTTP date
            if parsed is not None:
                return float(email.utils.mktime_tz(parsed) - time.time())
    return None


def _provider_error(error: openai.APIError, *, started: bool, timeout: float) -> ProviderError:
    if isinstance(error, openai.APITimeoutError):
        return ProviderError(
            "provider_timeout", f"The model server did not answer within {timeout:g} seconds."
        )
    if isinstance(error, openai.APIConnectionError):
        if started:
            return ProviderError(
                "connection_error", "The connection to the model server broke mid-reply."
            )
        return ProviderError("connection_error", "Could not connect to the model server.")
    detail = _upstream_detail(error)
    status = error.status_code if isinstance(error, openai.APIStatusError) else None
    if status == 429:
        return ProviderError(
            "rate_limited", "The model server is rate limiting requests; try again shortly."
        )
    if (status is None or status == 400 or status == 413) and _is_context_length(error):
        return ProviderError(
            "context_length_exceeded",
            f"The conversation is too long for the model's context window. {detail}".strip(),
        )
    if status in (401, 403):
        # Upstream text may quote part of the key, so it is not passed on.
        return ProviderError(
            "authentication_failed",
            f"The model server refused the credentials (HTTP {status}); check OPENAI_API_KEY.",
        )
    if status is not None and 400 <= status < 500:
        return ProviderError(
            "bad_request", f"The model server rejected the request (HTTP {status}). {detail}"
        )
    where = f"HTTP {status}" if status is not None else "during the reply"
    return ProviderError("provider_error", f"The model server failed ({where}). {detail}".strip())


def _is_context_length(error: openai.APIError) -> bool:
    text = f"{error.code or ''} {error.type or ''} {_upstream_message(error)}".lower()
    return any(hint in text for hint in _CONTEXT_LENGTH_HINTS)


def _upstream_message(error: openai.APIError) -> str:
    # The SDK's `message` is prefixed with "Error code: NNN - "; the body has the clean text.
    body = error.body
    if isinstance(body, dict) and isinstance(body.get("message"), str):
        return str(body["message"])
    return error.message


def _upstream_detail(error: openai.APIError) -> str:
    message = _SECRET_PATTERN.sub("[redacted]", _upstream_message(error)).strip()
    if len(message) > _MAX_DETAIL_CHARS:
        message = message[: _MAX_DETAIL_CHARS - 1] + "…"
    return message


def _describe(error: openai.APIError) -> str:
    if isinstance(error, openai.APIStatusError):
        return f"HTTP {error.status_code}"
    return type(error).__name__
