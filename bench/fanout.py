"""Fan-out benchmark: one Daphne relaying live replies to many websocket clients at once.

Real processes (the harness of bench.resume): the fake OpenAI upstream
(`tests.support.fake_openai_server`, which logs each chunk's send time), ONE Celery worker
(`--pool=threads --concurrency=<clients>`), ONE Daphne, Redis (REDIS_URL, or an embedded
Valkey), the database in DATABASE_URL (PostgreSQL; SQLite only with --allow-sqlite), migrated
first. Each client (websockets' asyncio client, all on one event loop, an API key) owns a
conversation and opens its socket; once all are open, each sends `message.create` and
follows its reply on that socket, as the browser does. Measured:

- lost events: gaps, sequence numbers below the last one received (for a finished reply: in
  the run's log, XLEN) never received; and replies whose text rebuilt from the events
  (eventlog.message_texts) differs from the stored message;
- duplicated events: a sequence number received twice;
- delivery latency: a message.delta's receive time here (time.time()) minus the wall send time
  of the newest upstream chunk it carries (matched by character offsets in the fake's chunk
  log): upstream → worker → Redis → Daphne → client, on one host's wall clock;
- memory per socket: Daphne's VmRSS with every socket open and idle after the runs minus its
  VmRSS with none open (after a one-reply warm-up), divided by the number of sockets.

A worker thread opens its database connection on its first step, so a first batch of replies
(fresh sockets, conversations and runs) warms the worker up: only its latency is reported, on
a row of its own; everything else is measured on the second batch. The memory baseline is
taken before the first batch.

To tell where latency comes from, `--probes` runs are also read straight from Redis here
(run_follow, on the same event loop), and the table shows when the runs were created in
the database (the spread of Run.created_at, while every message.create left within a few
ms), and the CPU each process and the whole host used until the last reply ended (clients
waiting for a run that never starts give up after 60 s of silence). The bench user, its API
key, conversations and run logs are deleted and the processes stopped at the end, also on
error. Exit code 0 whatever the verdicts.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/parley_fanout \\
        .venv/bin/python -m bench.fanout [--clients 200 --tokens 200 --tokens-per-second 20]
        [--probes 10 --pause 2]
"""

import argparse
import asyncio
import bisect
import contextlib
import itertools
import json
import math
import os
import re
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from django.core.management import call_command
from django.db import connection
from django.db.models import Max, Min
from websockets.asyncio.client import ClientConnection

from bench.common import cpu_seconds, database_refused, pct, progress
from bench.resume import (
    SILENCE_SECONDS,
    Stack,
    Timed,
    audit,
    common_arguments,
    finished,
    read_run,
    stack_up,
    ws_open,
)
from conversations.engine import eventlog
from conversations.models import Run

TARGET_P99_MS = 100.0
MARKER = "bench-fanout"
KEY = re.compile(rf"{MARKER} ([0-9a-f-]{{36}})")
STAMP = re.compile(r"^\[?[\d-]+ [\d:,]+:? |\[?[0-9a-f]{8}-[0-9a-f-]{27}\]?")  # for counting
Chunks = list[tuple[str, float]]  # a reply's upstream text chunks, (text, wall send time)
Sample = tuple[float, float, float, dict[str, float]]  # see sample()


def rss_kib(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(status.split("VmRSS:", 1)[1].split()[0])


def host_busy() -> tuple[float, float]:
    """This host's (busy, total) CPU time from /proc/stat, every process included."""
    ticks = [int(n) for n in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return sum(ticks) - ticks[3] - ticks[4], sum(ticks)


def chunk_times(path: Path, keys: set[str], timeout: float = 15) -> dict[str, Chunks]:
    """Each reply's text chunks with their send times, by the conversation id its user
    message carried (the fake logs a reply once it has finished)."""
    deadline = time.monotonic() + timeout
    replies: dict[str, Chunks] = {}
    while not keys <= replies.keys() and time.monotonic() < deadline:
        time.sleep(0.1)
        for line in path.read_text().splitlines():
            with contextlib.suppress(ValueError):  # a line being written
                entry = json.loads(line)
                if match := KEY.search(entry["user"] or ""):
                    texts = [(t, sent) for kind, t, sent in entry["chunks"] if kind == "text"]
                    replies[match[1]] = texts
    return replies


def latencies_ms(got: Timed, chunks: Chunks) -> list[float]:
    """Per message.delta: its receive time minus the send time of the newest chunk in it."""
    return [ms for _, ms in timed_latencies_ms(got, chunks)]


def timed_latencies_ms(got: Timed, chunks: Chunks) -> list[tuple[float, float]]:
    """latencies_ms, each with the time its delta was received."""
    ends = list(itertools.accumulate(len(text) for text, _ in chunks))
    found: list[tuple[float, float]] = []
    offset = 0
    for at, event in got:
        if event["type"] == eventlog.MESSAGE_CREATED:  # a retried step restarts the text
            found, offset = [], 0
        elif event["type"] == eventlog.MESSAGE_DELTA:
            offset += len(event["delta"])
            if (newest := bisect.bisect_left(ends, offset)) < len(ends):
                found.append((at, (at - chunks[newest][1]) * 1000))
    return found


# --- the benchmark -----------------------------------------------------------------------


@dataclass
class Client:
    conversation: str
    ws: ClientConnection | None = None
    sent_at: float = 0.0
    run_id: str | None = None
    got: Timed = field(default_factory=list)
    error: str = ""
    probe: Timed | None = None  # the same run's log read straight from Redis, if probing


async def probe(run_id: str, after: int, into: Timed) -> None:
    async for event in eventlog.run_follow(run_id, after=after):
        if isinstance(event, dict):
            into.append((time.time(), event))


async def each(
    clients: list[Client], job: Callable[[Client], Awaitable[None]], gate: int = 10**6
) -> None:
    """Run `job` for every client still without an error, `gate` at a time; note failures."""
    semaphore = asyncio.Semaphore(gate)

    async def one(client: Client) -> None:
        async with semaphore:
            try:
                await job(client)
            except Exception as exc:
                client.error = repr(exc)[:200]

    await asyncio.gather(*(one(client) for client in clients if not client.error))


async def sample(pids: dict[str, int], into: list[Sample]) -> None:
    """Every 0.5 s: the time, the host's (busy, total) CPU time, each process's CPU seconds."""
    while True:
        into.append((time.time(), *host_busy(), {n: cpu_seconds(p) for n, p in pids.items()}))
        await asyncio.sleep(0.5)


def cpu_used(samples: list[Sample], until: float) -> dict[str, float]:
    """CPU cores used per process, and by the whole host, from the first sample to `until`
    (the last reply's end: clients that wait for a run that never starts are not counted)."""
    kept = [sample for sample in samples if sample[0] <= until + 0.5] or samples[:2]
    (t0, busy0, total0, cpu0), (t1, busy1, total1, cpu1) = kept[0], kept[-1]
    used = {name: (cpu1[name] - cpu0[name]) / max(t1 - t0, 1e-9) for name in cpu0}
    cores = os.cpu_count() or 1
    used["the whole host, every process"] = (busy1 - busy0) / max(total1 - total0, 1) * cores
    windows = zip(kept, kept[4:], strict=False)  # 2 s each
    peak = max(((b[1] - a[1]) / max(b[2] - a[2], 1) for a, b in windows), default=math.nan)
    used["the whole host, busiest 2 s"] = peak * cores
    return used


async def reply_follow(client: Client, silence: float = SILENCE_SECONDS) -> None:
    """Send the client's `message.create` on its open socket (the time sent in `sent_at`)
    and follow the reply to its terminal event (TimeoutError after `silence` s quiet)."""
    assert client.ws is not None
    client.sent_at = time.time()
    content = f"{MARKER} {client.conversation}"  # the fake logs it: how chunks are matched
    await client.ws.send(json.dumps({"type": "message.create", "content": content}))
    client.run_id = await read_run(client.ws, client.got, limit=1, silence=silence)
    if finished(client.got) or client.run_id is None:
        return
    reader = None
    if client.probe is not None:  # from the first event on, as the socket reads it
        after = client.got[-1][1]["sequence_number"]
        reader = asyncio.ensure_future(probe(client.run_id, after, client.probe))
    await read_run(client.ws, client.got, run_id=client.run_id, silence=silence)
    if reader is not None:
        await asyncio.wait_for(reader, 30)


async def fanout(
    stack: Stack, clients: list[Client], rss: dict[str, int], pause: float
) -> dict[str, float]:
    """Open every socket, then start and follow all replies at once; CPU cores used. Daphne's
    RSS is read after `pause` seconds of quiet each time."""
    web = stack.webs[0]

    async def open_socket(client: Client) -> None:
        client.ws = await ws_open(web, client.conversation, stack.key)

    await each(clients, open_socket, gate=20)  # 20 handshakes at a time: no SYN flood
    await asyncio.sleep(pause)
    rss[f"{len(clients)} open, before the runs"] = rss_kib(web.process.pid)
    pids = {"Daphne": web.process.pid, "the worker": stack.worker.process.pid}
    pids |= {"the fake upstream": stack.fake.pid, "the clients (this process)": os.getpid()}
    samples: list[Sample] = []
    sampler = asyncio.ensure_future(sample(pids, samples))
    await each(clients, reply_follow)
    sampler.cancel()
    used = cpu_used(samples, max((c.got[-1][0] for c in clients if finished(c.got)), default=0))
    await asyncio.sleep(pause)
    rss[f"{len(clients)} open, idle after the runs"] = rss_kib(web.process.pid)
    await asyncio.gather(*(c.ws.close() for c in clients if c.ws), return_exceptions=True)
    await asyncio.sleep(pause)
    rss["all closed again"] = rss_kib(web.process.pid)
    return used


def report(
    clients: list[Client],
    cold: list[Client],
    stack: Stack,
    rss: dict[str, int],
    cpu: dict[str, float],
) -> None:
    audits = [audit(c.run_id, c.got) for c in clients]
    chunks = chunk_times(stack.chunk_log, {c.conversation for c in clients + cold})
    latency = [ms for c in clients for ms in latencies_ms(c.got, chunks.get(c.conversation, []))]
    cold_ms = [ms for c in cold for ms in latencies_ms(c.got, chunks.get(c.conversation, []))]
    first = [(c.got[0][0] - c.sent_at) * 1000 for c in clients if c.got]
    lost, dups = sum(a.lost for a in audits), sum(a.duplicated for a in audits)
    wrong = sum(a.problem == "text != stored message" for a in audits)
    pairs = zip(audits, clients, strict=True)
    problems = [(c.error or a.problem)[:120] for a, c in pairs if c.error or a.problem]
    idle = rss[f"{len(clients)} open, idle after the runs"]
    per_socket = (idle - rss["0 sockets"]) / len(clients)
    p99 = pct(latency, 99)
    probes = [(c.probe, c.got, chunks.get(c.conversation, [])) for c in clients if c.probe]
    direct = [ms for probe, _, sent in probes for ms in latencies_ms(probe, sent)]
    relayed = [ms for _, got, sent in probes for ms in latencies_ms(got, sent)]
    completed = f"{len(clients) - len(problems)} / {len(clients)}"
    runs = Run.objects.filter(pk__in=[c.run_id for c in clients if c.run_id])
    made = runs.aggregate(first=Min("created_at"), last=Max("created_at"))
    sends = [c.sent_at for c in clients if c.sent_at]
    spread = f"{(made['last'] - made['first']).total_seconds():.1f}" if made["first"] else "-"
    spread += f" (all sent within {max(sends, default=0) - min(sends, default=0):.2f})"

    def p50_p99(samples: list[float]) -> str:
        return f"{pct(samples, 50):.1f} / {pct(samples, 99):.1f}"

    rows = [
        ("runs completed and checked", completed, "all", not problems),
        ("lost events (sequence gaps)", lost, "0", lost == 0),
        ("replies != stored message", wrong, "0", wrong == 0),
        ("duplicated events", dups, "0", dups == 0),
        ("message.delta events timed", len(latency), "", None),
        ("delivery latency p50 ms", f"{pct(latency, 50):.1f}", "", None),
        ("delivery latency p99 ms", f"{p99:.1f}", f"<= {TARGET_P99_MS:g}", p99 <= TARGET_P99_MS),
        ("delivery latency max ms", f"{max(latency, default=math.nan):.1f}", "", None),
        ("first batch (cold worker): latency p50 / p99 ms", p50_p99(cold_ms), "", None),
        (f"{len(probes)} probe runs: via Daphne, p50 / p99 ms", p50_p99(relayed), "", None),
        (f"{len(probes)} probe runs: from Redis here, p50 / p99 ms", p50_p99(direct), "", None),
        ("run started -> run.created received p50 / p99 ms", p50_p99(first), "", None),
        ("runs created (Run.created_at) over s", spread, "", None),
        *((f"Daphne RSS, {name}, MiB", f"{kib / 1024:.1f}", "", None) for name, kib in rss.items()),
        ("memory per open socket KiB", f"{per_socket:.1f}", "", None),
        *((f"CPU cores used by {name}", f"{used:.2f}", "", None) for name, used in cpu.items()),
    ]
    print("| metric | value | target | result |\n|---|---:|---|---|")
    for name, value, target, good in rows:
        verdict = "" if good is None else "PASS" if good else "FAIL"
        print(f"| {name} | {value} | {target} | {verdict} |")
    errors = Counter(STAMP.sub("", line)[:150] for line in stack.log_errors())
    print(f"\n{len(problems)} clients failed:")
    print("\n".join(f"- {n} x {problem}" for problem, n in Counter(problems).most_common()))
    print(f"{sum(errors.values())} ERROR lines in the worker and Daphne logs (both batches):")
    print("\n".join(f"- {n} x {line}" for line, n in errors.most_common(6)))
    print(f"load average now {os.getloadavg()[0]:.2f} (other processes share this host)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=200, help="sockets, one run each")
    parser.add_argument("--tokens", type=int, default=200, help="tokens per reply")
    parser.add_argument("--tokens-per-second", type=float, default=20.0)
    parser.add_argument("--probes", type=int, default=10, help="runs also read from Redis")
    parser.add_argument("--pause", type=float, default=2.0, help="seconds idle before each RSS")
    common_arguments(parser)
    args = parser.parse_args()
    if min(args.clients, args.tokens, args.tokens_per_second) <= 0:
        parser.error("--clients, --tokens and --tokens-per-second must be positive")
    if database_refused("fanout", args.allow_sqlite):
        return 2
    call_command("migrate", interactive=False, verbosity=0)
    count, tokens, rate = args.clients, args.tokens, args.tokens_per_second
    with stack_up(tokens, rate, count) as stack:
        print(
            f"bench.fanout on {connection.display_name}, {os.cpu_count()} CPUs, load average "
            f"{os.getloadavg()[0]:.2f}: {count} sockets on one Daphne, one worker (threads x "
            f"{count}), one reply of {tokens} tokens at {rate:g}/s per socket\n"
        )
        progress("warm-up: one socket, one reply")
        warm = [Client(stack.conversation())]
        asyncio.run(fanout(stack, warm, {}, args.pause))
        if warm[0].error or audit(warm[0].run_id, warm[0].got).problem:
            progress(f"the warm-up reply failed ({warm[0].error}); measuring anyway")
        rss = {"0 sockets": rss_kib(stack.webs[0].process.pid)}
        cold = [Client(stack.conversation()) for _ in range(count)]
        progress(f"first batch, {count} sockets (fresh worker threads): latency only")
        asyncio.run(fanout(stack, cold, {}, args.pause))
        clients = [Client(stack.conversation()) for _ in range(count)]
        for client in clients[: args.probes]:
            client.probe = []
        progress(f"measured batch, {count} sockets: connecting, then one reply each")
        cpu = asyncio.run(fanout(stack, clients, rss, args.pause))
        report(clients, cold, stack, rss, cpu)
    return 0


if __name__ == "__main__":
    sys.exit(main())
