"""The OpenAI-compatible provider: OpenAI, vLLM, Ollama, llama.cpp ... via the official SDK.

The SDK runs asynchronously on its aiohttp transport (the `aiohttp` extra): a worker reads
every reply in flight on one event loop (conversations/engine/streaming.py), and aiohttp's C
HTTP parser reads a chunk for about half the CPU of the default httpx transport. The SDK's
own retries are off (`max_retries=0`): a streamed call may only be retried before its first
event reached the runner, and only this module knows when that happened.

The SDK sends the request and raises its status errors; the SSE body is read by
conversations/engine/llm/openai_sse.py. The request goes through the SDK's generic `post`,
not the typed `chat.completions.create`: that one runs `maybe_transform` over every message
and tool, which changed nothing in our (already wire-format) messages and made a
400-message request cost 74 ms of CPU instead of 3 (docs/PERFORMANCE.md, issue 19).
"""

from __future__ import annotations

import asyncio
import email.utils
import fnmatch
import logging
import random
import re
import time
import weakref
from collections.abc import AsyncGenerator, Iterator
from contextlib import AbstractAsyncContextManager
from typing import Any

import aiohttp
import httpx2
import openai
from django.conf import settings
from openai._response import async_to_streamed_response_wrapper
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from conversations.engine.llm.base import GenerationSettings, ProviderError, StreamEvent
from conversations.engine.llm.openai_sse import ChunkTranslator, read_chunks

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
# The token limit is sent as `max_completion_tokens`, OpenAI's current name. Older
# OpenAI-compatible servers (vLLM, llama.cpp, Ollama builds from before it) only know
# `max_tokens` and refuse the new name with a 400 that names it: "Unrecognized request
# argument supplied: max_completion_tokens", "unknown field `max_completion_tokens`", "extra
# fields not permitted". A refusal that names it without saying it is unknown (its value is
# too large, say) is a real error and is reported as one.
_LIMIT_PARAMETER = "max_completion_tokens"
_UNKNOWN_PARAMETER_HINTS = (
    "unrecognized",
    "unrecognised",
    "unknown",
    "unsupported",
    "not supported",
    "extra",
    "not permitted",
    "not allowed",
    "unexpected",
)
# The servers (by base URL) found to want `max_tokens`: remembered for the process, so only
# the first call to such a server pays for the refused request.
_SERVERS_WANTING_MAX_TOKENS: set[str] = set()


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
        generation: GenerationSettings | None = None,
    ) -> AsyncGenerator[StreamEvent, None]:
        generation = generation or GenerationSettings.effective()
        server = str(self.client.base_url)
        legacy = server in _SERVERS_WANTING_MAX_TOKENS  # it wants `max_tokens`
        attempt = 0
        while True:
            translator = ChunkTranslator(taken_call_ids=_call_ids(messages))
            started = False  # an event reached the caller: from then on, never retry
            try:
                async with self._open(model, messages, tools, generation, legacy) as response:
                    async for chunk in read_chunks(response):
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
                if not started and not legacy and _refuses_max_completion_tokens(error):
                    # An older server: ask again at once with the old name (not a retry of
                    # a failure, so it costs no attempt), and keep asking it that way.
                    legacy = True
                    _SERVERS_WANTING_MAX_TOKENS.add(server)
                    logger.warning(
                        "The model server at %s does not know %s; sending max_tokens instead",
                        server,
                        _LIMIT_PARAMETER,
                    )
                    continue
                if started or attempt >= self.max_retries or not _is_retryable(error):
                    raise _provider_error(error, started=started, timeout=self.timeout) from error
                delay = self._retry_delay(attempt, error)
                attempt += 1
                message = "Model call failed (%s); retry %d of %d in %.2fs"
                logger.warning(message, _describe(error), attempt, self.max_retries, delay)
                await asyncio.sleep(delay)

    def _open(
        self,
        model: str,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        generation: GenerationSettings,
        legacy: bool,
    ) -> AbstractAsyncContextManager[openai.AsyncAPIResponse[Any]]:
        # Entering sends the request: status errors and connect/header timeouts are raised
        # there as usual. The body is left unread for `read_chunks`; leaving closes it.
        # `legacy`: the server only knows the token limit as `max_tokens`.
        body = _request_body(model, messages, tools, generation, legacy=legacy)
        return _streamed_chat_completion(self.client, body)

    def _retry_delay(self, attempt: int, error: openai.APIError) -> float:
        retry_after = _retry_after_seconds(error)
        if retry_after is not None:
            return min(max(retry_after, 0.0), self.retry_after_max)
        delay = min(self.backoff_base * 2**attempt, self.backoff_max)
        return delay * (1 + random.uniform(0, 0.25))  # jitter spreads out concurrent retries


def _request_body(
    model: str,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]],
    generation: GenerationSettings,
    *,
    legacy: bool,
) -> dict[str, Any]:
    """The chat completion request's JSON body: the very keys, values and key order that
    `chat.completions.create(stream=True, ...)` sent for these inputs, built as a plain dict.

    Messages and tools are already in OpenAI's wire format, and for such input the typed
    path's `maybe_transform` returns an equal copy; it only costs CPU to find that out
    (~68 ms for a 400-message history against ~0.7 ms for `json.dumps` of the body: see
    docs/PERFORMANCE.md). tests/conversations/engine/llm/test_request_body.py checks the equality.
    """
    # Keys in the order of the SDK's own params dict, so even the bytes on the wire match.
    body: dict[str, Any] = {"model": model, "stream": True, "messages": messages}
    if generation.frequency_penalty is not None:
        body["frequency_penalty"] = generation.frequency_penalty
    body["max_tokens" if legacy else _LIMIT_PARAMETER] = generation.max_output_tokens
    # The tool settings go only with tools: servers refuse them for a request that has none.
    if tools and generation.parallel_tool_calls is not None:
        body["parallel_tool_calls"] = generation.parallel_tool_calls
    if generation.presence_penalty is not None:
        body["presence_penalty"] = generation.presence_penalty
    if generation.reasoning_effort is not None and takes_reasoning_effort(model):
        body["reasoning_effort"] = generation.reasoning_effort
    body["stream_options"] = {"include_usage": True}
    if generation.temperature is not None:  # otherwise the model's own default applies
        body["temperature"] = generation.temperature
    if tools and generation.tool_choice is not None:
        body["tool_choice"] = generation.tool_choice
    if tools:
        body["tools"] = tools
    if generation.top_p is not None:
        body["top_p"] = generation.top_p
    return body


def takes_reasoning_effort(model: str) -> bool:
    """Whether `model` is sent `reasoning_effort` (PARLEY_REASONING_EFFORT_MODELS): other
    models' servers refuse a parameter they do not know."""
    name = model.lower()
    return any(
        fnmatch.fnmatchcase(name, pattern.lower())
        for pattern in settings.PARLEY_REASONING_EFFORT_MODELS
    )


async def _post_chat_completion(
    client: openai.AsyncOpenAI,
    body: dict[str, Any],
    *,
    extra_headers: dict[str, str] | None = None,
) -> openai.AsyncStream[ChatCompletionChunk]:
    """What `chat.completions.create` does after its transform, with the body as given:
    the client's own `post`, so its auth and user-agent headers, timeout, retries
    (`max_retries`) and status-error mapping all apply unchanged. `security` is the typed
    method's (the project key as Bearer, never an admin key)."""
    return await client.post(
        "/chat/completions",
        body=body,
        cast_to=ChatCompletion,
        options={"headers": extra_headers or {}, "security": {"bearer_auth": True}},
        stream=True,
        stream_cls=openai.AsyncStream[ChatCompletionChunk],
    )


# The SDK's own `with_streaming_response` wrapper, as it wraps `create`: it asks (by an
# `X-Stainless-Raw-Response` header, sent as before) for the raw response with its body
# unread, and returns a context manager that sends on entry and closes the body on exit.
_streamed_chat_completion = async_to_streamed_response_wrapper(_post_chat_completion)


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


def _refuses_max_completion_tokens(error: openai.APIError) -> bool:
    """The server refused the request because it does not know `max_completion_tokens`."""
    if not isinstance(error, openai.APIStatusError) or error.status_code not in (400, 422):
        return False
    text = f"{error.code or ''} {error.param or ''} {_upstream_message(error)}".lower()
    return _LIMIT_PARAMETER in text and any(hint in text for hint in _UNKNOWN_PARAMETER_HINTS)


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


def _call_ids(messages: list[dict[str, Any]]) -> Iterator[str]:
    """The ids of the calls in the history sent, which a new call must not take."""
    for message in messages:
        for call in message.get("tool_calls") or ():
            if isinstance(call, dict) and isinstance(call.get("id"), str):
                yield call["id"]
