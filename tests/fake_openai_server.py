"""The fake OpenAI upstream (tests/fake_openai.py) as a process of its own, for benchmarks.

    .venv/bin/python -m tests.fake_openai_server --port 0 --first-token-delay 0.2 \\
        --tokens-per-second 100 --tokens 300 --chunk-log var/chunks.jsonl

In its own process the fake's threads (one per streamed reply) do not compete for the
benchmarked process's GIL, which distorts timings at tens of concurrent streams. Every
request gets the default script: `--tokens` text tokens (short words), the first one
`--first-token-delay` seconds after the headers, then `--tokens-per-second`. Once serving it
prints `listening <base_url>` on stdout; it stops on SIGTERM or SIGINT.

After each response it appends one JSON line to `--chunk-log` (never while streaming):
`{"user": <last user message content>, "received_at": <wall>, "chunks": [[<kind>, <text or
null>, <wall_time>], ...]}`, where `wall_time` is time.time() just after the chunk was
flushed to the socket: wall clock, so other processes can compare it with their own.
"""

from __future__ import annotations

import argparse
import json
import signal
import threading
import time
from pathlib import Path
from typing import Any

from tests.fake_openai import FakeOpenAI, RecordedRequest, Script, _Handler, _Server

WORDS = (
    *("the", "model", "streams", "a", "reply", "token", "by", "token", "while", "readers"),
    *("follow", "the", "run", "log", "and", "a", "worker", "writes", "coalesced", "deltas"),
    *("into", "one", "stream", "per", "run", "so", "latency", "stays", "low"),
)


def tokens(count: int) -> list[str]:
    """`count` short tokens (a space and a word, 2 to 10 characters)."""
    return [f" {WORDS[i % len(WORDS)]}" for i in range(count)]


class _LoggingHandler(_Handler):
    def do_POST(self) -> None:
        try:
            super().do_POST()
        finally:
            fake = self.server.fake
            if isinstance(fake, LoggingFakeOpenAI):
                fake.log_last_request()


class LoggingFakeOpenAI(FakeOpenAI):
    """FakeOpenAI on a chosen port that logs each finished request's chunks as JSON lines
    (and then forgets the request, so a long benchmark does not accumulate them)."""

    def __init__(self, *, port: int, default_script: Script, chunk_log: Path) -> None:
        super().__init__(default_script=default_script)
        self.port = port
        self._log = chunk_log.open("a", encoding="utf-8")
        self._log_lock = threading.Lock()
        self._local = threading.local()  # the request each handler thread is serving

    def start(self) -> LoggingFakeOpenAI:
        if self._server is not None:
            return self
        self._stopping.clear()
        self._server = _Server(("127.0.0.1", self.port), _LoggingHandler)
        self._server.fake = self
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.05,), daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        super().stop()
        with self._log_lock:
            self._log.close()

    def _record(self, path: str, headers: dict[str, str], body: dict[str, Any]) -> RecordedRequest:
        record = super()._record(path, headers, body)
        self._local.record = record
        return record

    def log_last_request(self) -> None:
        record: RecordedRequest | None = getattr(self._local, "record", None)
        self._local.record = None
        if record is None:
            return
        users = [m for m in record.messages if isinstance(m, dict) and m.get("role") == "user"]
        content = users[-1].get("content") if users else None
        line = {
            "user": content if isinstance(content, str) else json.dumps(content),
            "received_at": time.time() - (time.perf_counter() - record.received_at),
            "chunks": [[c.kind, c.text, c.wall_time] for c in record.chunks],
        }
        with self._lock:
            self._requests.remove(record)
        with self._log_lock:
            if not self._log.closed:
                self._log.write(json.dumps(line, separators=(",", ":")) + "\n")
                self._log.flush()


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
    # Blocked before any thread starts (threads inherit the mask): only sigwait sees them.
    stop_signals = {signal.SIGTERM, signal.SIGINT}
    signal.pthread_sigmask(signal.SIG_BLOCK, stop_signals)
    fake = LoggingFakeOpenAI(port=args.port, default_script=script, chunk_log=args.chunk_log)
    fake.start()
    print(f"listening {fake.base_url}", flush=True)
    signal.sigwait(stop_signals)
    fake.stop()


if __name__ == "__main__":
    main()
