"""The OpenAI-compatible provider: OpenAI, vLLM, Ollama, llama.cpp ... via the official SDK.

The SDK runs asynchronously on its aiohttp transport (the `aiohttp` extra): a worker reads
every reply in flight on one event loop (conversations/streaming.py), and aiohttp's C
HTTP parser reads a chunk for about half the CPU of the default httpx transport. The SDK's
own retries are off (`max_retries=0`): a streamed call may only be retried before its first
event reached the runner, and only this module knows when that happened.

The SDK sends the request and raises its status errors, but the SSE body is parsed here into
plain dicts: the SDK's pydantic model per chunk cost ~6x the CPU of reading it.
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import logging
import random
import re
import ssl
import time
import uuid
import weakref
from collections.abc import AsyncGenerator, AsyncIterator, Iterable, Iterator
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any, cast

import aiohttp
import httpx2
import openai
from django.conf import settings
from openai.types.chat import (
    ChatCompletionChunk,
    ChatCompletionMessageParam,
    ChatCompletionToolUnionParam,
)

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
_USAGE_TOTALS = frozenset({"prompt_tokens", "completion_tokens", "total_tokens"})
_UNREADABLE = "The model server sent a reply that could not be read."


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
        http_client: httpx2.AsyncClient | None = None,
    ) -> None:
        self.timeout = float(settings.OPENAI_TIMEOUT_SECONDS if timeout is None else timeout)
        self.max_retries = settings.OPENAI_MAX_RETRIES if max_retries is None else max_retries
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self.retry_after_max = retry_after_max
        self.api_key = api_key or settings.OPENAI_API_KEY
        self.base_url = base_url or settings.OPENAI_BASE_URL or None
        self._http_client = http_client  # tests pass a mock transport
        # An async client belongs to the event loop it first ran on (its connection pool
        # does): one per loop, reused across calls on that loop.
        self._clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, openai.AsyncOpenAI]
        self._clients = weakref.WeakKeyDictionary()

    @property
    def client(self) -> openai.AsyncOpenAI:
        """The SDK client of the running event loop."""
        loop = asyncio.get_running_loop()
        client = self._clients.get(loop)
        if client is None:
            http_client = self._http_client or openai.DefaultAioHttpClient(timeout=self.timeout)
            client = self._clients[loop] = openai.AsyncOpenAI(
                api_key=self.api_key,
                base_url=self.base_url,
                timeout=self.timeout,
                max_retries=0,
                http_client=http_client,
            )
        return client

    async def aclose(self) -> None:
        """Close the running loop's client and its connections."""
        client = self._clients.pop(asyncio.get_running_loop(), None)
        if client is not None:
            await client.close()

    async def stream(
        self,
        *,
        model: str,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
    ) -> AsyncGenerator[StreamEvent, None]:
        attempt = 0
        while True:
            translator = _ChunkTranslator()
            started = False  # an event reached the caller: from then on, never retry
            try:
                async with self._open(model, messages, tools) as response:
                    async for chunk in _read_chunks(response):
                        for event in translator.feed(chunk):
                            started = True
                            yield event
                for event in translator.finish():
                    yield event
                return
            except openai.APIError as raised:
                error = _unwrapped(raised)
                if translator.finish_reason and isinstance(error, openai.APIConnectionError):
                    # Only the usage chunk or [DONE] was lost: the reply itself is complete.
                    logger.warning("Stream broke after its finish reason; keeping the reply")
                    for event in translator.finish():
                        yield event
                    return
                if started or attempt >= self.max_retries or not _is_retryable(error):
                    raise _provider_error(error, started=started, timeout=self.timeout) from error
                delay = self._retry_delay(attempt, error)
                attempt += 1
                message = "Model call failed (%s); retry %d of %d in %.2fs"
                logger.warning(message, _describe(error), attempt, self.max_retries, delay)
                await asyncio.sleep(delay)

    def _open(
        self, model: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]]
    ) -> AbstractAsyncContextManager[openai.AsyncAPIResponse[Any]]:
        # Entering sends the request: status errors and connect/header timeouts are raised
        # there as usual. The body is left unread for `_read_chunks`; leaving closes it.
        # Messages and tools are already in OpenAI's wire format; the casts only name that.
        return self.client.chat.completions.with_streaming_response.create(
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


async def _read_chunks(response: openai.AsyncAPIResponse[Any]) -> AsyncIterator[dict[str, Any]]:
    """The JSON chunks of a chat completion stream, up to `data: [DONE]`. Transport failures
    and `{"error": ...}` events raise what the SDK's stream raised, so retries and error
    mapping are unchanged."""
    parser = SSEParser()
    try:
        async for read in response.iter_bytes():
            for event, data in parser.feed(read):
                if data.startswith(b"[DONE]"):
                    return
                yield _chunk(response, event, data)
    except httpx2.TimeoutException as error:
        raise openai.APITimeoutError(request=response.http_request) from error
    except (httpx2.RequestError, ssl.SSLError) as error:
        raise openai.APIConnectionError(request=response.http_request) from error


def _chunk(response: openai.AsyncAPIResponse[Any], event: bytes, data: bytes) -> dict[str, Any]:
    try:  # per the SSE spec, invalid UTF-8 is replaced, not fatal
        chunk = json.loads(data.decode("utf-8", "replace"))
    except json.JSONDecodeError as error:
        raise ProviderError("provider_error", _UNREADABLE) from error
    if not isinstance(chunk, dict):
        raise ProviderError("provider_error", _UNREADABLE)
    if chunk.get("error") or event == b"error":
        body = chunk.get("error") or chunk
        message = _text(body.get("message")) if isinstance(body, dict) else None
        message = message or "An error occurred during streaming"
        raise openai.APIError(message, response.http_request, body=body)
    return chunk


class SSEParser:
    """Server-Sent Events by the WHATWG event-stream rules, fed one network read at a time.

    Lines end in LF, CR or CRLF, also split across reads; `:` lines are comments; the `data`
    lines of an event are joined with LF; a blank line dispatches the event (none if it had
    no data); an unterminated event at the end is dropped. `id` and `retry` only serve
    EventSource reconnection, which does not apply to a POST: they are ignored.
    """

    def __init__(self) -> None:
        self._partial: list[bytes] = []  # a line split across reads, joined once: linear
        self._after_cr = False  # the last read ended in CR: a leading LF completes that CRLF
        self._at_start = True  # a UTF-8 BOM may open the stream
        self._data: list[bytes] = []
        self._event = b""

    def feed(self, chunk: bytes) -> list[tuple[bytes, bytes]]:
        """The (event type, data) of each event this read completed."""
        if self._after_cr and chunk.startswith(b"\n"):
            chunk = chunk[1:]
        if not chunk:
            return []
        self._after_cr = chunk.endswith(b"\r")
        lines = chunk.splitlines()  # bytes split only on LF, CR and CRLF
        tail = b"" if chunk.endswith((b"\n", b"\r")) else lines.pop()
        partial = self._partial
        if lines and partial:
            lines[0] = b"".join([*partial, lines[0]])
            partial.clear()
        if self._at_start and lines:
            lines[0], self._at_start = lines[0].removeprefix(b"\xef\xbb\xbf"), False
        if tail:
            partial.append(tail)
        found: list[tuple[bytes, bytes]] = []
        data = self._data
        for line in lines:
            if line.startswith(b"data:"):  # nearly every line: checked first
                data.append(line[6:] if line[5:6] == b" " else line[5:])
            elif not line:
                if data:
                    found.append((self._event, b"\n".join(data)))
                    data.clear()
                self._event = b""
            elif not line.startswith(b":"):
                name, _, value = line.partition(b":")
                value = value[1:] if value[:1] == b" " else value
                if name == b"event":
                    self._event = value
                elif name == b"data":  # a bare `data` line adds an empty one
                    data.append(value)
        return found


def _sse_events(reads: Iterable[bytes]) -> Iterator[tuple[bytes, bytes]]:
    """Every event of a sequence of reads (tests read the parser through this)."""
    parser = SSEParser()
    for read in reads:
        yield from parser.feed(read)


@dataclass
class _PendingCall:
    server_id: str | None
    name: str = ""
    call_id: str = ""  # set when ToolCallStarted is emitted
    buffered_arguments: list[str] = field(default_factory=list)


class _ChunkTranslator:
    """Turns chunks (JSON dicts) into protocol events, assembling tool calls by index.

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

    def feed(self, chunk: dict[str, Any] | ChatCompletionChunk) -> Iterator[StreamEvent]:
        if isinstance(chunk, ChatCompletionChunk):  # an SDK model has the same wire shape
            chunk = cast(dict[str, Any], chunk.to_dict())
        if isinstance(usage := chunk.get("usage"), dict):
            self._usage = _usage_event(usage)
        for choice in chunk.get("choices") or ():
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:  # never n > 1
                continue
            if isinstance(delta := choice.get("delta"), dict):
                # A refusal is what the user should read instead.
                for text in (_text(delta.get("content")), _text(delta.get("refusal"))):
                    if text:
                        yield TextDelta(text)
                for piece in delta.get("tool_calls") or ():
                    if isinstance(piece, dict):
                        yield from self._feed_tool_call(piece)
            self.finish_reason = _text(choice.get("finish_reason")) or self.finish_reason

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

    def _feed_tool_call(self, piece: dict[str, Any]) -> Iterator[StreamEvent]:
        # Tolerate servers that omit `index`: continue the latest call.
        index = raw if isinstance(raw := piece.get("index"), int) else self._last_index
        self._last_index = index
        piece_id = _text(piece.get("id"))
        call = self._calls_by_index.get(index)
        if call is None or (piece_id and call.server_id and piece_id != call.server_id):
            call = self._calls_by_index[index] = _PendingCall(server_id=piece_id)
        elif piece_id and not call.server_id and not call.call_id:
            call.server_id = piece_id
        function = found if isinstance(found := piece.get("function"), dict) else {}
        name = _text(function.get("name"))
        if name and not call.call_id:
            call.name += name
        arguments = _text(function.get("arguments"))
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


def _usage_event(usage: dict[str, Any]) -> UsageReported:
    # A null means "not reported": dropped here and in `*_details`, as the SDK's dump did.
    details = {
        key: {k: v for k, v in value.items() if v is not None} if isinstance(value, dict) else value
        for key, value in usage.items()
        if value is not None and key not in _USAGE_TOTALS
    }
    return UsageReported(
        prompt_tokens=usage.get("prompt_tokens") or 0,
        completion_tokens=usage.get("completion_tokens") or 0,
        total_tokens=usage.get("total_tokens") or 0,
        details=details,
    )


def _text(value: object) -> str | None:  # a field of another type counts as absent
    return value if isinstance(value, str) and value else None


def _unwrapped(error: openai.APIError) -> openai.APIError:
    """The SDK error with the transport's cause read correctly.

    The aiohttp transport maps every `aiohttp.ClientConnectionError` to a connect *timeout*,
    so a refused or reset connection would be reported as the server being slow. Its
    original exception is kept in the cause chain: a timeout only if that says so.
    """
    if not isinstance(error, openai.APITimeoutError):
        return error
    cause: BaseException | None = error
    while cause is not None:
        if isinstance(cause, aiohttp.ServerTimeoutError | asyncio.TimeoutError):
            return error
        if isinstance(cause, aiohttp.ClientError | OSError):
            return openai.APIConnectionError(request=error.request)
        cause = cause.__cause__ or cause.__context__
    return error


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
