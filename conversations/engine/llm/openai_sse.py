"""Reading a streamed chat completion's body: Server-Sent Events into JSON chunks, and
chunks into the protocol's stream events (conversations/engine/llm/base.py).

The body is parsed here into plain dicts rather than by the SDK: its pydantic model per
chunk cost ~6x the CPU of reading it. Transport failures and in-stream errors are raised as
the SDK's own errors, so the provider retries and maps them as it always did.
"""

from __future__ import annotations

import json
import logging
import ssl
import uuid
from collections.abc import AsyncIterator, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, cast

import httpx2
import openai
from openai.types.chat import ChatCompletionChunk

from conversations.engine.llm.base import (
    Finished,
    ProviderError,
    ProviderFields,
    ReasoningDelta,
    StreamEvent,
    TextDelta,
    ToolCallArgumentsDelta,
    ToolCallStarted,
    UsageReported,
    call_id_storable,
)
from conversations.engine.llm.provider_fields import FIELDS_MAX
from conversations.validation import storable_json, storable_text

logger = logging.getLogger(__name__)

_USAGE_TOTALS = frozenset({"prompt_tokens", "completion_tokens", "total_tokens"})
# The fields of a chunk and of its choice that are read into the reply (choices, usage) or
# that only frame the stream: the same id, model and time on every chunk, OpenAI's
# `obfuscation` (random padding that hides the length of each token). Every other field the
# server sends is kept with the reply (ProviderFields). A delta's own extra fields are not:
# they are pieces of a stream like its text, and the last piece alone would mislead.
_CHUNK_FRAMING = frozenset(
    {"id", "object", "created", "model", "choices", "usage", "error", "obfuscation"}
)
_CHOICE_FRAMING = frozenset({"index", "delta", "finish_reason", "logprobs"})
_UNREADABLE = "The model server sent a reply that could not be read."


async def read_chunks(response: openai.AsyncAPIResponse[Any]) -> AsyncIterator[dict[str, Any]]:
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


def sse_events(reads: Iterable[bytes]) -> Iterator[tuple[bytes, bytes]]:
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


class ChunkTranslator:
    """Turns chunks (JSON dicts) into protocol events, assembling tool calls by index.

    A call is announced once its name is known; argument pieces that come earlier are held
    back. A new id at an index that already has a call starts a new call (some servers put
    parallel calls at one index). Usage and the finish reason are held until the end so
    `Finished` is always last, whatever order the server used.

    The server's extra fields are merged as chunks arrive and announced (ProviderFields)
    after the next chunk that carries some of the reply, or at the end: an announcement
    alone never counts as the reply having started, so a call that breaks before its first
    token is still retried, and a stopped reply keeps the fields it had so far.
    """

    def __init__(self, *, taken_call_ids: Iterable[str] = ()) -> None:
        # Ids already in the conversation sent, and those given in this reply, as stored.
        self._call_ids = {call_id_storable(call_id) for call_id in taken_call_ids}
        self._calls_by_index: dict[int, _PendingCall] = {}
        self._announced = 0
        self._last_index = 0
        self._usage: UsageReported | None = None
        self.finish_reason: str | None = None
        self._reply_fields: dict[str, Any] = {}
        self._choice_fields: dict[str, Any] = {}
        self._fields_changed = False

    def feed(self, chunk: dict[str, Any] | ChatCompletionChunk) -> Iterator[StreamEvent]:
        if isinstance(chunk, ChatCompletionChunk):  # an SDK model has the same wire shape
            chunk = cast(dict[str, Any], chunk.to_dict())
        self._merge(self._reply_fields, chunk, _CHUNK_FRAMING)
        started = False
        for event in self._events(chunk):
            started = True
            yield event
        if started and self._fields_changed:
            yield self._fields()

    def _events(self, chunk: dict[str, Any]) -> Iterator[StreamEvent]:
        if isinstance(usage := chunk.get("usage"), dict):
            self._usage = _usage_event(usage)
        for choice in chunk.get("choices") or ():
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:  # never n > 1
                continue
            self._merge(self._choice_fields, choice, _CHOICE_FRAMING)
            if isinstance(delta := choice.get("delta"), dict):
                # vLLM and DeepSeek name a reasoning model's thoughts `reasoning_content`,
                # Ollama and OpenRouter `reasoning`; a server sending both sends the same
                # text twice, so the first one present is read.
                thought = _text(delta.get("reasoning_content")) or _text(delta.get("reasoning"))
                if thought:
                    yield ReasoningDelta(thought)
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
        if self._fields_changed:
            yield self._fields()
        if self._usage is not None:
            yield self._usage
        yield Finished(self.finish_reason)

    def _merge(
        self, fields: dict[str, Any], source: dict[str, Any], framing: frozenset[str]
    ) -> None:
        """Later chunks win. A null means "not reported in this chunk" (OpenAI sends
        `"usage": null` that way), so it never replaces what an earlier chunk said. Names
        past FIELDS_MAX are not even remembered: a server making up a new name per chunk
        costs no memory."""
        for name, value in source.items():
            # Runs for every chunk: the common cases (framing, unchanged) are tested first.
            if name in framing or value is None or fields.get(name) == value:
                continue
            if name not in fields and len(fields) >= FIELDS_MAX:
                continue
            fields[name] = value
            self._fields_changed = True

    def _fields(self) -> ProviderFields:
        self._fields_changed = False
        return ProviderFields(reply=dict(self._reply_fields), choice=dict(self._choice_fields))

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
            call.call_id = self._call_id_unique(call.server_id)
            yield ToolCallStarted(index=self._announced, call_id=call.call_id, name=call.name)
            self._announced += 1
            if call.buffered_arguments:
                yield ToolCallArgumentsDelta(call.call_id, "".join(call.buffered_arguments))
                call.buffered_arguments.clear()

    def _call_id_unique(self, server_id: str | None) -> str:
        """The server's id for a new call, unless it names a call already in the
        conversation or in this reply (some servers number calls from 0 on every reply,
        or repeat an id): results find their calls by id, so a repeated one would answer
        the wrong call and leave a history no import takes. Such a call, like one the
        server left unnamed, gets a fresh id, which is what is streamed and stored."""
        if server_id and call_id_storable(server_id) not in self._call_ids:
            call_id = server_id
        else:
            call_id = f"call_{uuid.uuid4().hex}"
        self._call_ids.add(call_id_storable(call_id))
        return call_id


def _usage_event(usage: dict[str, Any]) -> UsageReported:
    # A null means "not reported": dropped here and in `*_details`, as the SDK's dump did.
    details = {
        key: {k: v for k, v in value.items() if v is not None} if isinstance(value, dict) else value
        for key, value in usage.items()
        if value is not None and key not in _USAGE_TOTALS
    }
    return UsageReported(
        prompt_tokens=_count(usage.get("prompt_tokens")),
        completion_tokens=_count(usage.get("completion_tokens")),
        total_tokens=_count(usage.get("total_tokens")),
        details=storable_json(details),
    )


def _text(value: object) -> str | None:  # a field of another type counts as absent
    # What the provider sends cannot be refused, so it is made storable on arrival: the
    # events and the stored message then hold the same text.
    return storable_text(value) if isinstance(value, str) and value else None


# Far beyond any real reply, and within what every sum of counts can hold.
TOKEN_COUNT_MAX = 2**40


def _count(value: object) -> int:
    """A token count as reported, or 0 when it is not a whole number a reply could have
    (a broken or hostile upstream must not falsify or overflow the usage figures)."""
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= TOKEN_COUNT_MAX:
        return value
    return 0
