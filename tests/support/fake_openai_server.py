"""The fake OpenAI upstream as a process of its own, for benchmarks.

    .venv/bin/python -m tests.support.fake_openai_server --port 0 --first-token-delay 0.2 \\
        --tokens-per-second 100 --tokens 300 --chunk-log var/chunks.jsonl

Every request gets the same reply, built by the test fake's own planner
(tests/support/fake_openai.py), so the chunks are byte for byte what the tests stream: `--tokens`
text tokens (short words), the first one `--first-token-delay` seconds after the headers,
then `--tokens-per-second`. Once serving it prints `listening <base_url>` on stdout; it
stops on SIGTERM or SIGINT.

It serves on one asyncio loop rather than the test fake's thread per reply. A benchmark
shares its host with the processes it measures, and at 1,000 replies streaming at once the
threads cost half a core, most of it handing the GIL around: CPU a remote upstream would
not take from Parley. Here one loop paces every reply against its own schedule.

After each response it appends one JSON line to `--chunk-log` (never while streaming):
`{"user": <last user message content>, "received_at": <wall>, "chunks": [[<kind>, <text or
null>, <wall_time>], ...]}`, where `wall_time` is time.time() just after the chunk was
handed to the socket: wall clock, so other processes can compare it with their own.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import time
from pathlib import Path
from typing import Any, TextIO

import uvloop
from aiohttp import web

from tests.support.fake_openai import (
    CONTENT_KINDS,
    UNKNOWN_REQUEST,
    Script,
    _error_body,
    _plan_events,
)

WORDS = (
    *("the", "model", "streams", "a", "reply", "token", "by", "token", "while", "readers"),
    *("follow", "the", "run", "log", "and", "a", "worker", "writes", "coalesced", "deltas"),
    *("into", "one", "stream", "per", "run", "so", "latency", "stays", "low"),
)
COMPLETIONS = "/v1/chat/completions"


def tokens(count: int) -> list[str]:
    """`count` short tokens (a space and a word, 2 to 10 characters)."""
    return [f" {WORDS[i % len(WORDS)]}" for i in range(count)]


class ChunkLog:
    """One JSON line per finished response, appended to a file."""

    def __init__(self, path: Path) -> None:
        self._file: TextIO = path.open("a", encoding="utf-8")

    def write(self, *, body: dict[str, Any], received_at: float, chunks: list[list[Any]]) -> None:
        messages = body.get("messages")
        users = [m for m in messages or () if isinstance(m, dict) and m.get("role") == "user"]
        content = users[-1].get("content") if users else None
        line = {
            "user": content if isinstance(content, str) else json.dumps(content),
            "received_at": received_at,
            "chunks": chunks,
        }
        if not self._file.closed:
            self._file.write(json.dumps(line, separators=(",", ":")) + "\n")
            self._file.flush()

    def close(self) -> None:
        self._file.close()


def app_build(script: Script, log: ChunkLog) -> web.Application:
    async def completions(request: web.Request) -> web.StreamResponse:
        received_at = time.time()
        try:
            body = json.loads(await request.read() or b"{}")
        except ValueError:
            body = None
        if not isinstance(body, dict):
            return web.json_response(UNKNOWN_REQUEST, status=404)
        if not body.get("stream"):
            message = "The fake server only answers streamed requests (stream=true)."
            return web.json_response(_error_body(message, "invalid_request_error"), status=400)
        usage_requested = bool((body.get("stream_options") or {}).get("include_usage"))
        events = _plan_events(script, body, usage_requested=usage_requested)
        headers = {"Content-Type": "text/event-stream; charset=utf-8", "Cache-Control": "no-cache"}
        response = web.StreamResponse(headers=headers)
        response.enable_chunked_encoding()
        await response.prepare(request)  # the headers go out now, as a real server sends them
        transport = request.transport
        assert transport is not None
        await asyncio.sleep(script.first_token_delay)
        rate = script.tokens_per_second
        interval = 1.0 / rate if rate > 0 else 0.0
        started = time.perf_counter()
        content_sent = 0
        chunks: list[list[Any]] = []
        for kind, data, text in events:
            if kind in CONTENT_KINDS:
                # Paced against a fixed schedule, so sleeping late does not add up.
                if interval and content_sent:
                    await asyncio.sleep(started + content_sent * interval - time.perf_counter())
                content_sent += 1
            if transport.is_closing():  # the client went away: so does the reply, unlogged
                return response
            # Framed here and written straight to the socket: each chunk is one write,
            # without the response writer's per-call bookkeeping.
            payload = b"data: %s\n\n" % data.encode()
            transport.write(b"%x\r\n%s\r\n" % (len(payload), payload))
            chunks.append([kind, text, time.time()])
        await response.write_eof()  # the closing empty chunk
        log.write(body=body, received_at=received_at, chunks=chunks)
        return response

    async def unknown(request: web.Request) -> web.Response:
        return web.json_response(UNKNOWN_REQUEST, status=404)

    app = web.Application(client_max_size=64 * 1024 * 1024)  # long conversations are large
    app.router.add_post(COMPLETIONS, completions)
    app.router.add_route("*", "/{tail:.*}", unknown)
    return app


async def serve(port: int, script: Script, chunk_log: Path) -> None:
    log = ChunkLog(chunk_log)
    runner = web.AppRunner(app_build(script, log), access_log=None, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", port, backlog=4096)
    await site.start()
    bound = runner.addresses[0][1]  # the port, when 0 asked for any free one
    print(f"listening http://127.0.0.1:{bound}/v1", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for number in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(number, stop.set)
    await stop.wait()
    await runner.cleanup()
    log.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=0, help="0: any free port")
    parser.add_argument("--first-token-delay", type=float, default=0.2, help="seconds")
    parser.add_argument("--tokens-per-second", type=float, default=100.0)
    parser.add_argument("--tokens", type=int, default=300, help="text tokens per reply")
    parser.add_argument("--chunk-log", type=Path, required=True, help="JSONL file to append to")
    args = parser.parse_args()
    script = Script(
        text=tokens(args.tokens),
        first_token_delay=args.first_token_delay,
        tokens_per_second=args.tokens_per_second,
    )
    uvloop.run(serve(args.port, script, args.chunk_log))


if __name__ == "__main__":
    main()
