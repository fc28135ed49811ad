"""A fake OpenAI-compatible upstream for tests and benchmarks.

A real HTTP server on 127.0.0.1 (a thread per connection) streams `chat.completion.chunk`
Server-Sent Events exactly as OpenAI does, so the official SDK runs unmodified against it.
Each request consumes one queued `Script` (`default_script` when the queue is empty) and is
recorded with its parsed body, headers and the send time of every chunk:
`with FakeOpenAI() as fake: fake.push(Script(text="Hi"), Script.http(429)); ...fake.base_url`

Like a real model it stops at the request's token limit (`max_completion_tokens`, or the
older `max_tokens`): a script with more tokens is cut there and finishes with `length`.
`fake.refuse_parameter(name)` makes it an older server that does not know a parameter: a
request carrying it is answered 400 naming it (recorded, no script consumed).
"""

from __future__ import annotations

import contextlib
import json
import socket
import sys
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

# (call id or None to omit it, function name, arguments JSON text)
ToolCallSpec = tuple[str | None, str, str]

_ERROR_DEFAULTS: dict[int, tuple[str, str, str | None]] = {
    400: ("Invalid request.", "invalid_request_error", None),
    401: ("Incorrect API key provided: sk-te***st.", "invalid_request_error", "invalid_api_key"),
    429: ("Rate limit reached for requests.", "requests", "rate_limit_exceeded"),
    500: ("The server had an error while processing your request.", "server_error", None),
}
# How an older OpenAI-compatible server refuses a parameter it does not know.
UNKNOWN_PARAMETER_MESSAGE = "Unrecognized request argument supplied: {name}"
CONTEXT_LENGTH_MESSAGE = (
    "This model's maximum context length is 128000 tokens. However, your messages resulted "
    "in 130000 tokens. Please reduce the length of the messages."
)


@dataclass
class Script:
    """What the fake answers to one request."""

    # Reply text: a list of tokens, or a string cut into ~4-character tokens.
    text: str | list[str] | None = None
    tool_calls: Sequence[ToolCallSpec] = ()
    argument_pieces: int = 3  # each call's arguments arrive in this many chunks
    interleave_calls: bool = False  # argument chunks of parallel calls alternate
    reuse_index: bool = False  # every call at index 0, each with a new id (some servers)
    omit_ids: bool = False
    finish_reason: str | None = None  # None: "tool_calls" if there are calls, else "stop"
    send_finish_reason: bool = True
    headers_delay: float = 0.0  # seconds before the status line
    first_token_delay: float = 0.0  # seconds after the headers, before the first chunk
    tokens_per_second: float = 0.0  # pace of content chunks; 0 = as fast as possible
    http_error: int | None = None
    error_message: str | None = None
    error_type: str | None = None
    error_code: str | None = None
    retry_after: float | None = None  # Retry-After header on an error response
    cut_after_chunks: int | None = None  # drop the connection after N chunks, no [DONE]
    error_event_after_chunks: int | None = None  # an in-stream {"error": ...} event
    # After N chunks: send nothing for `stall_seconds` (longer than the client's timeout),
    # or a chunk that is not JSON.
    stall_after_chunks: int | None = None
    stall_seconds: float = 0.0
    garbage_after_chunks: int | None = None
    include_usage: bool = True  # send the usage chunk when the request asks for it
    usage: dict[str, Any] | None = None  # overrides the estimated usage
    on_chunk: Callable[[int, float], None] | None = None  # (chunk index, perf_counter)
    # A reasoning model's thoughts, streamed before the text, one token per chunk in
    # `delta.<reasoning_field>` (vLLM and DeepSeek say `reasoning_content`, Ollama and
    # OpenRouter `reasoning`): a list of tokens, or a string cut into ~4-character tokens.
    # Paced like the text; not counted against the request's token limit.
    reasoning: str | list[str] | None = None
    reasoning_field: str = "reasoning_content"
    # Extra fields a server adds, by chunk kind (role, reasoning, text, tool, finish, usage;
    # "*" for every chunk): merged into the chunk itself, or into its choice.
    chunk_fields: dict[str, dict[str, Any]] = field(default_factory=dict)
    choice_fields: dict[str, dict[str, Any]] = field(default_factory=dict)

    @classmethod
    def http(
        cls,
        status: int,
        *,
        code: str | None = None,
        message: str | None = None,
        retry_after: float | None = None,
    ) -> Script:
        """An error response in OpenAI's JSON error format."""
        return cls(
            http_error=status, error_code=code, error_message=message, retry_after=retry_after
        )

    def tokens(self) -> list[str]:
        if self.text is None:
            return []
        if isinstance(self.text, list):
            return list(self.text)
        return [self.text[i : i + 4] for i in range(0, len(self.text), 4)]

    def reasoning_tokens(self) -> list[str]:
        if isinstance(self.reasoning, str):
            return [self.reasoning[i : i + 4] for i in range(0, len(self.reasoning), 4)]
        return list(self.reasoning or [])


@dataclass
class ChunkSent:
    """One SSE event as written and flushed to the socket."""

    index: int
    kind: str  # role, text, tool, finish, usage, error, done
    data: str  # the `data:` payload
    text: str | None  # the content token of a text chunk
    perf_counter: float
    wall_time: float


@dataclass
class RecordedRequest:
    path: str
    headers: dict[str, str]  # lower-cased names
    body: dict[str, Any]
    script: Script
    received_at: float  # perf_counter
    chunks: list[ChunkSent] = field(default_factory=list)
    refused: str | None = None  # the parameter an older server refused it for

    @property
    def token_limit(self) -> Any:
        """The reply's token limit as sent, whichever name it went by (None: none)."""
        return self.body.get("max_completion_tokens", self.body.get("max_tokens"))

    @property
    def messages(self) -> list[dict[str, Any]]:
        return list(self.body.get("messages", []))


class _Stopped(Exception):
    """The server is shutting down; a handler abandons its response."""


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256  # benchmarks open 50+ connections at once
    fake: FakeOpenAI

    def handle_error(self, request: Any, client_address: Any) -> None:
        # Clients hanging up (timeouts, cancelled streams) are expected, not test failures.
        if isinstance(sys.exc_info()[1], OSError | _Stopped):
            return
        super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive and chunked bodies, as real servers do
    # Each SSE chunk goes out at once, as real servers send them: with Nagle's algorithm a
    # small write waits for the client's delayed ACK, adding 40 ms to a reply's end.
    disable_nagle_algorithm = True
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def setup(self) -> None:
        super().setup()
        with self.server.fake._lock:
            self.server.fake._connections.add(self.connection)

    def finish(self) -> None:
        with self.server.fake._lock:
            self.server.fake._connections.discard(self.connection)
        super().finish()

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        path = self.path.split("?", 1)[0]
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            body = None
        if path != "/v1/chat/completions" or not isinstance(body, dict):
            self._send_json(404, UNKNOWN_REQUEST)
            return
        headers = {name.lower(): value for name, value in self.headers.items()}
        fake = self.server.fake
        record = fake._record(path, headers, body)
        script = record.script
        fake._sleep(script.headers_delay)
        if script.http_error is not None:
            self._send_error_script(script)
        elif not body.get("stream"):
            message = "The fake server only answers streamed requests (stream=true)."
            self._send_json(400, _error_body(message, "invalid_request_error"))
        else:
            self._stream(record, body)

    def _send_json(
        self, status: int, payload: dict[str, Any], extra: dict[str, str] | None = None
    ) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in (extra or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def _send_error_script(self, script: Script) -> None:
        status = script.http_error or 500
        fallback = _ERROR_DEFAULTS[500 if status >= 500 else 400]
        message, type_, code = _ERROR_DEFAULTS.get(status, fallback)
        if script.error_code == "context_length_exceeded":
            message = CONTEXT_LENGTH_MESSAGE
        error = _error_body(
            script.error_message or message, script.error_type or type_, script.error_code or code
        )
        extra = {"Retry-After": f"{script.retry_after:g}"} if script.retry_after is not None else {}
        self._send_json(status, error, extra)

    def _stream(self, record: RecordedRequest, body: dict[str, Any]) -> None:
        script = record.script
        fake = self.server.fake
        usage_requested = bool((body.get("stream_options") or {}).get("include_usage"))
        events = _plan_events(script, body, usage_requested=usage_requested)

        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.wfile.flush()

        fake._sleep(script.first_token_delay)
        interval = 1.0 / script.tokens_per_second if script.tokens_per_second > 0 else 0.0
        started = time.perf_counter()
        content_sent = 0
        for index, (kind, data, text) in enumerate(events):
            if script.cut_after_chunks is not None and index >= script.cut_after_chunks:
                self._drop_connection()
                return
            if index == script.stall_after_chunks:
                fake._sleep(script.stall_seconds)
            if index == script.garbage_after_chunks:
                self._send_event(record, index, "garbage", "{not json", None)
                break
            if index == script.error_event_after_chunks:
                message = script.error_message or _ERROR_DEFAULTS[500][0]
                error = _error_body(message, "server_error", script.error_code)
                self._send_event(record, index, "error", json.dumps(error), None)
                break
            if kind in CONTENT_KINDS:
                # Pace against a fixed schedule so sleeping overhead does not add up.
                if interval and content_sent:
                    fake._sleep(started + content_sent * interval - time.perf_counter())
                content_sent += 1
            self._send_event(record, index, kind, data, text)
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _send_event(
        self, record: RecordedRequest, index: int, kind: str, data: str, text: str | None
    ) -> None:
        payload = f"data: {data}\n\n".encode()
        self.wfile.write(b"%x\r\n%s\r\n" % (len(payload), payload))
        self.wfile.flush()
        sent = ChunkSent(index, kind, data, text, time.perf_counter(), time.time())
        record.chunks.append(sent)
        if record.script.on_chunk is not None:
            record.script.on_chunk(index, sent.perf_counter)

    def _drop_connection(self) -> None:
        # Mid-body close without the terminating chunk: the client sees a broken stream.
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)


def _error_body(message: str, type_: str, code: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": type_, "param": None, "code": code}}


UNKNOWN_REQUEST = _error_body("Unknown path or bad JSON.", "invalid_request_error")
CONTENT_KINDS = frozenset({"reasoning", "text", "tool"})  # chunks paced as tokens


def _plan_events(
    script: Script, body: dict[str, Any], *, usage_requested: bool
) -> list[tuple[str, str, str | None]]:
    """Every SSE event of the reply, in order: (kind, data, text of a text chunk)."""
    envelope = {
        "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": str(body.get("model") or "fake-model"),
        "system_fingerprint": "fp_fake",
    }

    def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> str:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
        # With include_usage, OpenAI sends `"usage": null` on every chunk but the last.
        usage = {"usage": None} if usage_requested else {}
        return json.dumps({**envelope, "choices": [choice], **usage})

    tokens = script.tokens()
    pieces = _tool_call_pieces(script)
    reason = script.finish_reason or ("tool_calls" if script.tool_calls else "stop")
    # Each text chunk and tool-call piece is a token: the reply stops at the request's limit.
    limit = body.get("max_completion_tokens", body.get("max_tokens"))
    if isinstance(limit, int) and len(tokens) + len(pieces) > limit:
        tokens, pieces = tokens[:limit], pieces[: max(0, limit - len(tokens))]
        reason = "length"
    role = {"role": "assistant", "content": "" if tokens else None, "refusal": None}
    events: list[tuple[str, str, str | None]] = [("role", chunk(role), None)]
    thoughts = script.reasoning_tokens()
    events += [("reasoning", chunk({script.reasoning_field: t}), None) for t in thoughts]
    events += [("text", chunk({"content": token}), token) for token in tokens]
    events += [("tool", chunk({"tool_calls": [piece]}), None) for piece in pieces]
    if script.send_finish_reason:
        events.append(("finish", chunk({}, reason), None))
    if usage_requested and script.include_usage:
        prompt_tokens = max(1, len(json.dumps(body.get("messages", []))) // 4)
        completion_tokens = sum(1 for kind, _, _ in events if kind in ("text", "tool"))
        usage = script.usage or {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
            "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0},
        }
        events.append(("usage", json.dumps({**envelope, "choices": [], "usage": usage}), None))
    if script.chunk_fields or script.choice_fields:
        events = [(kind, _with_fields(script, kind, data), text) for kind, data, text in events]
    events.append(("done", "[DONE]", None))
    return events


def _with_fields(script: Script, kind: str, data: str) -> str:
    """A chunk with the script's extra fields for its kind added (a server's own facts)."""
    chunk = json.loads(data)
    chunk.update({**script.chunk_fields.get("*", {}), **script.chunk_fields.get(kind, {})})
    extra = {**script.choice_fields.get("*", {}), **script.choice_fields.get(kind, {})}
    for choice in chunk["choices"]:
        choice.update(extra)
    return json.dumps(chunk)


def _tool_call_pieces(script: Script) -> list[dict[str, Any]]:
    """The `delta.tool_calls` entries: a header per call, then its argument pieces."""
    per_call: list[list[dict[str, Any]]] = []
    for position, (call_id, name, arguments) in enumerate(script.tool_calls):
        index = 0 if script.reuse_index else position
        header: dict[str, Any] = {
            "index": index,
            "type": "function",
            "function": {"name": name, "arguments": ""},
        }
        if call_id is not None and not script.omit_ids:
            header["id"] = call_id
        size = max(1, -(-len(arguments) // max(1, script.argument_pieces)))
        pieces = [
            {"index": index, "function": {"arguments": arguments[i : i + size]}}
            for i in range(0, len(arguments), size)
        ]
        per_call.append([header, *pieces])
    if not script.interleave_calls:
        return [piece for call in per_call for piece in call]
    interleaved: list[dict[str, Any]] = []
    for step in range(max((len(call) for call in per_call), default=0)):
        interleaved += [call[step] for call in per_call if step < len(call)]
    return interleaved


class FakeOpenAI:
    """The fake server. Thread-safe: scripts and records may be used from many threads."""

    def __init__(self, *, default_script: Script | None = None) -> None:
        self.default_script = default_script or Script(text="OK")
        self._scripts: deque[Script] = deque()
        self._responder: Callable[[dict[str, Any]], Script] | None = None
        self._refused: dict[str, str] = {}  # parameter -> the error message
        self._requests: list[RecordedRequest] = []
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._connections: set[socket.socket] = set()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    # --- lifecycle ---
    def start(self) -> FakeOpenAI:
        if self._server is not None:
            return self
        self._stopping.clear()
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.fake = self
        # A short poll interval keeps stop() fast.
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.05,), daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is None:
            return
        self._stopping.set()  # wakes handlers sleeping in delays
        self._server.shutdown()
        self._server.server_close()
        with self._lock:
            connections = list(self._connections)
        for connection in connections:  # idle keep-alive connections would block handlers
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._server = None
        self._thread = None

    def __enter__(self) -> FakeOpenAI:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # --- scripting and records ---
    @property
    def base_url(self) -> str:
        if self._server is None:
            raise RuntimeError("FakeOpenAI is not started")
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def push(self, *scripts: Script) -> None:
        with self._lock:
            self._scripts.extend(scripts)

    def respond_with(self, responder: Callable[[dict[str, Any]], Script] | None) -> None:
        """Choose the script from the request body when no pushed script is left.

        A deterministic "model": a step retried after a crash gets the same answer as
        the first try, whichever step it was, which a queue of scripts cannot promise.
        """
        with self._lock:
            self._responder = responder

    def refuse_parameter(self, name: str, message: str | None = None) -> None:
        """Act as an older server that does not know the request parameter `name`: a request
        carrying it is answered 400 with `message` (OpenAI's own wording by default)."""
        with self._lock:
            self._refused[name] = message or UNKNOWN_PARAMETER_MESSAGE.format(name=name)

    @property
    def requests(self) -> list[RecordedRequest]:
        with self._lock:
            return list(self._requests)

    def reset(self) -> None:
        """Forget queued scripts and recorded requests (the default script stays)."""
        with self._lock:
            self._scripts.clear()
            self._requests.clear()
            self._responder = None
            self._refused.clear()

    # --- used by the handler ---
    def _record(self, path: str, headers: dict[str, str], body: dict[str, Any]) -> RecordedRequest:
        with self._lock:
            refused = next((name for name in self._refused if name in body), None)
            if refused is not None:
                # Refused before any generation: the queued scripts are for later requests.
                script = Script.http(400, message=self._refused[refused])
                record = RecordedRequest(path, headers, body, script, time.perf_counter())
                record.refused = refused
                self._requests.append(record)
                return record
            if self._scripts:
                script = self._scripts.popleft()
            elif self._responder is not None:
                script = self._responder(body)
            else:
                script = self.default_script
            record = RecordedRequest(path, headers, body, script, time.perf_counter())
            self._requests.append(record)
        return record

    def _sleep(self, seconds: float) -> None:
        if seconds > 0 and self._stopping.wait(seconds):
            raise _Stopped
