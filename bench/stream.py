"""Streaming benchmark: how fast does a run start, how late do readers see each token, and
how many Redis writes does a reply cost, at 1 and at 50 concurrent runs?

Real processes: the fake OpenAI upstream (`tests.support.fake_openai_server`: 300 tokens at 100/s
after 0.2 s, each chunk's send time logged), a Celery worker (`--pool=threads
--concurrency=<runs>`, as the Procfile runs it), Redis (REDIS_URL, or an embedded Valkey), the
database in DATABASE_URL (PostgreSQL; SQLite only with --allow-sqlite), migrated first. This
process starts runs with `services.run_start`; a child process follows each run's log with
`run_follow` on one asyncio loop, as the SSE view does. Per row (PARLEY_EVENT_COALESCE_MS
given to the worker) one worker is started, warmed up by one unmeasured batch, then
`--rounds` are timed:

- dispatch: the commit of run_start → Run.started_at (set by the worker when it leases it);
- event latency: a message.delta's receive time here → the send time of the newest upstream
  chunk whose text it carries (matched by character offsets); the coalescing delay is the
  same from the oldest chunk it carries, the cost of batching;
- writes: XLEN of each run's stream (every event is one XADD) per 1,000 tokens, and the
  message.delta events alone; worker CPU: its process's CPU time per 1,000 tokens.

Every timestamp compared across processes is wall clock (time.time(), and the database's
now() for started_at): perf_counter and monotonic clocks do not share an origin between
processes. All processes run on this host, so they read the same clock. The bench user, its
conversations and the runs' event logs are deleted at the end, also on error.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/parley_stream \\
        .venv/bin/python -m bench.stream --coalesce-ms 0,50,200
"""

import argparse
import asyncio
import bisect
import contextlib
import itertools
import json
import math
import multiprocessing
import os
import re
import secrets
import sys
import tempfile
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path

from bench.common import (
    cpu_seconds,
    django_setup,
    fake_start,
    owner_delete,
    pct,
    progress,
)

django_setup()

from django.conf import settings  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection, transaction  # noqa: E402

from accounts.models import User  # noqa: E402
from conversations import (  # noqa: E402
    engine,
    services,
)
from conversations.engine import eventlog  # noqa: E402
from conversations.models import Conversation, Run  # noqa: E402
from tests.support.redis_server import redis_start  # noqa: E402
from tests.support.workers import worker_start  # noqa: E402

TARGET_DISPATCH_P50_MS = 15.0
TARGET_EVENT_P50_MS = 5.0
TARGET_EVENT_P99_MS = 30.0
TARGET_WRITES_PER_1K = 60.0
FOLLOW_TIMEOUT = 120.0
MARKER = "bench-stream"
KEY = re.compile(rf"{MARKER} ([0-9a-f-]{{36}})")
Received = list[tuple[float, eventlog.Event]]  # (wall-clock receive time, event)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--concurrency", default="1,50", help="concurrent runs, comma-separated")
    parser.add_argument("--coalesce-ms", default="", help="PARLEY_EVENT_COALESCE_MS values too")
    parser.add_argument("--rounds", type=int, default=5, help="timed batches per row")
    parser.add_argument(
        "--arrival",
        default="burst,steady",
        help="burst: a row's runs start at once; steady: they arrive evenly, so that as many "
        "are always in flight (comma-separated)",
    )
    parser.add_argument("--tokens", type=int, default=300, help="tokens per reply")
    parser.add_argument("--tokens-per-second", type=float, default=100.0)
    parser.add_argument("--first-token-delay", type=float, default=0.2, help="seconds")
    parser.add_argument("--allow-sqlite", action="store_true", help="run on a non-PostgreSQL DB")
    args = parser.parse_args()
    try:
        args.concurrency = [int(n) for n in args.concurrency.split(",") if n.strip()]
        args.coalesce_ms = [int(n) for n in args.coalesce_ms.split(",") if n.strip()]
        args.arrival = [a.strip() for a in args.arrival.split(",") if a.strip()]
    except ValueError:
        parser.error("--concurrency and --coalesce-ms take comma-separated integers")
    if not args.arrival or not set(args.arrival) <= {"burst", "steady"}:
        parser.error("--arrival takes burst, steady or both")
    if min([*args.concurrency, args.rounds, args.tokens, 1 + min(args.coalesce_ms, default=0)]) < 1:
        parser.error("concurrency levels, --rounds and --tokens must be >= 1, windows >= 0")
    return args


@dataclass
class Row:
    coalesce: str
    runs: int
    arrival: str  # "burst": all runs started at once; "steady": `runs` in flight throughout
    dispatch_ms: list[float] = field(default_factory=list)
    event_ms: list[float] = field(default_factory=list)
    coalescing_ms: list[float] = field(default_factory=list)
    writes: int = 0  # XLEN summed over runs: every event is one XADD
    deltas: int = 0
    tokens: int = 0
    cpu_tokens: int = 0  # tokens of every run the worker served (ramp-up runs too)
    worker_cpu_s: float = 0.0
    problems: list[str] = field(default_factory=list)

    def per_1k(self, count: float) -> float:
        return count * 1000 / self.tokens if self.tokens else math.nan

    def verdict(self) -> str:
        checks = {
            "dispatch p50": pct(self.dispatch_ms, 50) <= TARGET_DISPATCH_P50_MS,
            "event p50": pct(self.event_ms, 50) <= TARGET_EVENT_P50_MS,
            "event p99": pct(self.event_ms, 99) <= TARGET_EVENT_P99_MS,
            "writes": self.per_1k(self.writes) <= TARGET_WRITES_PER_1K,
            "errors": not self.problems,
        }
        failed = [name for name, ok in checks.items() if not ok]
        return f"FAIL ({', '.join(failed)})" if failed else "PASS"

    def line(self) -> str:
        cells = [self.coalesce, str(self.runs), self.arrival]
        for samples in (self.dispatch_ms, self.event_ms, self.coalescing_ms):
            cells += [f"{pct(samples, 50):.1f}", f"{pct(samples, 99):.1f}"]
        cells += [f"{self.per_1k(count):.0f}" for count in (self.writes, self.deltas)]
        cpu_per_1k = self.worker_cpu_s * 1e6 / self.cpu_tokens if self.cpu_tokens else math.nan
        cells.append(f"{cpu_per_1k:.0f}")
        return "| " + " | ".join([*cells, self.verdict()]) + " |"


HEADER = (
    "| coalesce ms | runs | arrival | dispatch p50 ms | dispatch p99 ms | event p50 ms "
    "| event p99 ms | coalescing p50 ms | coalescing p99 ms | writes / 1k tok | deltas / 1k tok "
    "| worker CPU ms / 1k tok | verdict |\n|---|---:|---|" + "---:|" * 9 + "---|"
)


class ChunkLog:
    """The fake upstream's JSONL log: each reply's text tokens with their send wall times,
    by the conversation id the bench put in the user message."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.replies: dict[str, list[tuple[str, float]]] = {}

    def wait_for(self, keys: set[str], timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            with self.path.open("rb") as log:
                log.seek(self.offset)
                data = log.read()
            complete = data[: data.rfind(b"\n") + 1]
            self.offset += len(complete)
            for line in complete.splitlines():
                entry = json.loads(line)
                if match := KEY.search(entry["user"] or ""):
                    texts = [(t, wall) for kind, t, wall in entry["chunks"] if kind == "text"]
                    self.replies[match[1]] = texts
            if keys <= self.replies.keys() or time.monotonic() > deadline:
                return
            time.sleep(0.05)


class Readers:
    """Followers on one asyncio loop in a process of their own, as in a web process: in
    this process they would wait for the GIL while it stores the next runs."""

    def __init__(self) -> None:
        context = multiprocessing.get_context("spawn")  # never fork a process with threads
        self.requests: multiprocessing.Queue[str | None] = context.Queue()
        self.results: multiprocessing.Queue[tuple[str, Received]] = context.Queue()
        self.process = context.Process(
            target=_readers_main, args=(self.requests, self.results), daemon=True
        )
        self.process.start()
        self.waiting: dict[str, Future[Received]] = {}
        self.lock = threading.Lock()
        self.collector = threading.Thread(target=self._collect, daemon=True)
        self.collector.start()

    def follow(self, run_id: str) -> Future[Received]:
        future: Future[Received] = Future()
        with self.lock:
            self.waiting[run_id] = future
        self.requests.put(run_id)
        return future

    def _collect(self) -> None:
        while True:
            try:
                run_id, received = self.results.get()
            except (EOFError, OSError):
                return
            with self.lock:
                future = self.waiting.pop(run_id, None)
            if future is not None:
                future.set_result(received)

    def close(self) -> None:
        self.requests.put(None)
        self.process.join(timeout=10)
        if self.process.is_alive():
            self.process.kill()


def _readers_main(
    requests: "multiprocessing.Queue[str | None]",
    results: "multiprocessing.Queue[tuple[str, Received]]",
) -> None:
    django_setup()
    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, daemon=True).start()

    async def follow(run_id: str) -> None:
        received: Received = []
        async for event in eventlog.run_follow(run_id, timeout=FOLLOW_TIMEOUT):
            if isinstance(event, dict):
                received.append((time.time(), event))
        results.put((run_id, received))

    while (run_id := requests.get()) is not None:
        asyncio.run_coroutine_threadsafe(follow(run_id), loop)


def run_start_timed(conversation: Conversation) -> tuple[Run, float]:
    """run_start in an outer transaction whose first on-commit callback notes the commit's
    wall time, before run_start's own callback announces the run and enqueues its step."""
    committed: list[float] = []
    content = f"{MARKER} {conversation.id}"  # the fake logs it: how its replies are matched
    with transaction.atomic():
        transaction.on_commit(lambda: committed.append(time.time()))
        _, run = engine.run_start(conversation=conversation, content=content)
    return run, committed[0]


def run_batch(
    owner: User, row: Row, readers: Readers, log: ChunkLog, *, reply_s: float, measure: bool
) -> None:
    """A burst: `row.runs` runs started back to back, all streaming at once. Steady: twice
    as many, one every `reply_s / runs` seconds, so that once the first half has ramped up
    `row.runs` replies are in flight at any moment; only the second half is measured.
    Waits for every run's end."""
    count = row.runs if row.arrival == "burst" else 2 * row.runs
    interval = 0.0 if row.arrival == "burst" else reply_s / row.runs
    conversations = [services.conversation_create(owner=owner) for _ in range(count)]
    started = []
    begun = time.monotonic()
    for number, conversation in enumerate(conversations):
        time.sleep(max(0.0, begun + number * interval - time.monotonic()))
        run, committed = run_start_timed(conversation)
        started.append((conversation, run, committed, readers.follow(str(run.id))))
    outcomes = [(c, r, t, future.result(FOLLOW_TIMEOUT + 30)) for c, r, t, future in started]
    if not measure:
        return
    outcomes = outcomes[count - row.runs :]
    log.wait_for({str(conversation.id) for conversation, *_ in outcomes})
    client = eventlog.redis_client()
    for conversation, run, committed, received in outcomes:
        run.refresh_from_db()
        xlen = client.xlen(eventlog.stream_key(run.id))
        if run.status != Run.Status.COMPLETED or run.started_at is None:
            problem = f"run ended {run.status} {run.error or ''}"
        elif len(received) != xlen:
            problem = f"read {len(received)} events of {xlen}"
        else:
            problem = measure_run(row, log.replies.get(str(conversation.id), []), received)
        if problem or run.started_at is None:
            row.problems.append(f"run {run.id}: {problem}")
            continue
        row.dispatch_ms.append((run.started_at.timestamp() - committed) * 1000)
        row.writes += xlen


def measure_run(row: Row, chunks: list[tuple[str, float]], received: Received) -> str:
    """Match each delta event to the upstream chunks it carries; an error text, or ''."""
    if not chunks:
        return "no upstream chunks logged"
    texts = [text for text, _ in chunks]
    sent = [wall for _, wall in chunks]
    ends = list(itertools.accumulate(len(text) for text in texts))  # end offset of each chunk
    event_ms: list[float] = []
    coalescing_ms: list[float] = []
    parts: list[str] = []
    offset = 0
    for at, event in received:
        if event["type"] == eventlog.MESSAGE_CREATED:  # a retried step restarts the text
            event_ms, coalescing_ms, parts, offset = [], [], [], 0
        elif event["type"] == eventlog.MESSAGE_DELTA:
            start, offset = offset, offset + len(event["delta"])
            parts.append(event["delta"])
            newest = bisect.bisect_left(ends, offset)  # holds character offset - 1
            if newest >= len(ends):
                return "more text than the upstream sent"
            event_ms.append((at - sent[newest]) * 1000)
            coalescing_ms.append((at - sent[bisect.bisect_right(ends, start)]) * 1000)
    if "".join(parts) != "".join(texts):
        return f"text differs from the upstream's ({offset} of {ends[-1]} characters)"
    row.event_ms += event_ms
    row.coalescing_ms += coalescing_ms
    row.deltas += len(event_ms)
    row.tokens += len(texts)
    return ""


def measure_row(
    owner: User,
    row: Row,
    env: dict[str, str],
    args: argparse.Namespace,
    readers: Readers,
    log: ChunkLog,
) -> None:
    """One worker for the row, warmed up by an unmeasured batch, then `rounds` timed ones."""
    worker = worker_start(
        redis_url=settings.REDIS_URL, env=env, pool="threads", concurrency=2 * row.runs
    )
    reply_s = args.first_token_delay + args.tokens / args.tokens_per_second
    name = f"coalesce {row.coalesce}, {row.runs} runs, {row.arrival}"
    try:
        progress(f"{name}: warm-up batch")
        run_batch(owner, row, readers, log, reply_s=reply_s, measure=False)
        cpu = cpu_seconds(worker.process.pid)
        for number in range(1, args.rounds + 1):
            progress(f"{name}: batch {number}/{args.rounds}")
            run_batch(owner, row, readers, log, reply_s=reply_s, measure=True)
            row.cpu_tokens += (row.runs if row.arrival == "burst" else 2 * row.runs) * args.tokens
        row.worker_cpu_s = cpu_seconds(worker.process.pid) - cpu
    finally:
        worker.stop()
        worker.log_path.unlink(missing_ok=True)


def main() -> int:
    args = parse_args()
    if connection.vendor != "postgresql" and not args.allow_sqlite:
        print(
            f"bench.stream measures PostgreSQL, but the database is {connection.vendor} "
            f"({connection.settings_dict['NAME']}). Set DATABASE_URL=postgres://... "
            "or pass --allow-sqlite to run anyway.",
            file=sys.stderr,
        )
        return 2
    call_command("migrate", interactive=False, verbosity=0)
    with contextlib.ExitStack() as cleanup:  # undone in reverse order, also on error
        cleanup.callback(redis_start()[1])
        handle, name = tempfile.mkstemp(prefix="parley-chunks-", suffix=".jsonl")
        os.close(handle)
        log_path = Path(name)
        cleanup.callback(log_path.unlink, missing_ok=True)
        fake, base_url = fake_start(
            tokens=args.tokens,
            rate=args.tokens_per_second,
            chunk_log=log_path,
            first_token_delay=args.first_token_delay,
        )
        cleanup.callback(fake.wait, timeout=10)
        cleanup.callback(fake.terminate)
        readers, log = Readers(), ChunkLog(log_path)
        cleanup.callback(readers.close)
        owner = User.objects.create_user(username=f"bench-{secrets.token_hex(6)}")
        cleanup.callback(owner_delete, owner)
        info = eventlog.redis_client().info("server")
        version = getattr(connection, "pg_version", 0)  # 150020 for 15.20
        database = f"{connection.display_name} {version // 10000}.{version % 10000}"
        print(
            f"bench.stream on {database if version else connection.display_name}, "
            "Redis-protocol server "
            f"{info.get('valkey_version') or info.get('redis_version')}, {os.cpu_count()} "
            f"CPUs; {args.tokens} tokens at {args.tokens_per_second:g}/s after "
            f"{args.first_token_delay:g} s, {args.rounds} timed batches per row\n"
        )
        rows: list[Row] = []
        for coalesce in [None, *args.coalesce_ms]:
            for runs in args.concurrency:
                env = {"OPENAI_API_KEY": "bench", "OPENAI_BASE_URL": base_url}
                env["OPENAI_MAX_RETRIES"] = "0"
                if coalesce is not None:
                    env["PARLEY_EVENT_COALESCE_MS"] = str(coalesce)
                default = f"default ({settings.PARLEY_EVENT_COALESCE_MS})"
                for arrival in args.arrival:
                    if runs == 1 and arrival == "steady" and len(args.arrival) > 1:
                        continue  # one run at a time is the same either way
                    rows.append(Row(default if coalesce is None else str(coalesce), runs, arrival))
                    measure_row(owner, rows[-1], env, args, readers, log)
                    progress(rows[-1].line())
        print("\n".join([HEADER, *(row.line() for row in rows)]))
        print(
            f"\ntargets: dispatch p50 <= {TARGET_DISPATCH_P50_MS:g} ms; event latency p50 <= "
            f"{TARGET_EVENT_P50_MS:g} ms, p99 <= {TARGET_EVENT_P99_MS:g} ms; "
            f"<= {TARGET_WRITES_PER_1K:g} writes per 1,000 tokens"
        )
        for row in rows:
            for problem in row.problems[:5]:
                print(f"coalesce {row.coalesce}, {row.runs} runs: {problem}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
