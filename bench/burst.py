"""Many users at once (issue 19): a burst of replies, many replies streaming on one worker,
and `POST chat/` on long conversations, measured black-box against `make run`'s processes.

The worker, beat and one Daphne are started exactly as the Procfile starts them
(bench/procfile.py: `celery -A config worker --pool=threads
--concurrency=${WORKER_CONCURRENCY:-8} -Q parley`, Daphne with its ping flags), with the
default settings (`config.settings.local`; DEBUG off as in every benchmark unless the
shell sets it) unless an option overrides them (`--worker-concurrency N` sets
WORKER_CONCURRENCY). The fake OpenAI upstream (tests.support.fake_openai_server) runs in its own
process and logs each chunk's send time; Redis is REDIS_URL or an embedded Valkey; the
database is DATABASE_URL (PostgreSQL; SQLite only with --allow-sqlite), migrated first.
The websocket clients run in this process, each with the bench user's API key and a
conversation of its own; bench.fanout and bench.resume supply the client and the checks.

`--scenario burst` (200 clients, replies of 60 tokens at 20 tokens/s): after one warm-up
reply, every socket is opened, then every client sends `message.create` at the same
moment and follows its reply to the terminal event. Time to first token: the first
`message.delta` received minus the moment that client's `message.create` was sent
(p50 / p90 / p99 / max), split into sent -> the upstream received the request (run
creation, queue, step start), the upstream's own first-token delay (`--first-token-delay`,
the fake's default 0.2 s), and first chunk sent -> first delta received. Completion: the
terminal event received minus sent. Lost (sequence gaps) and duplicated events, and
replies whose streamed text differs from the stored message (bench.resume's audit).

`--scenario many` (1,000 clients, replies of 300 tokens at 10 tokens/s): the same on one
worker process. Reported: replies completed, the most streaming at once (each client's
first delta to its last event), the worker's peak RSS (VmHWM in /proc/<pid>/status), and
event delivery latency as bench.fanout measures it (a delta's receipt minus the send time
of the newest upstream chunk it carries). At the Procfile's 8 threads a worker streams 8
replies at a time, so this needs `--timeout` to end in reasonable time.

`--scenario chat`: `POST /api/v1/chat/` end to end with a zero-latency upstream on
conversations of `--sizes` messages (bench/burst_chat.py).

`--timeout` caps the measured phase, and a client's wait for its next frame: a client
without its terminal event by then counts as not completed. The processes are stopped,
and the bench users, their conversations, run logs, throttle counters and any steps left
in the broker deleted at the end, also on error. Exit code 0 whatever the verdicts.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/parley_burst \\
        .venv/bin/python -m bench.burst --scenario burst|many|chat [--worker-concurrency N]
        [--clients N] [--tokens N] [--tokens-per-second R] [--timeout S]
"""

import argparse
import asyncio
import contextlib
import json
import math
import os
import sys
import time
from collections import Counter
from pathlib import Path

import uvloop

from bench.common import django_setup

django_setup()

from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402

from bench.burst_chat import SIZES, chat_scenario  # noqa: E402
from bench.common import Row, database_refused, pct, progress, status_kib, table_print  # noqa: E402
from bench.fanout import (  # noqa: E402
    KEY,
    STAMP,
    Client,
    Sample,
    chunk_times,
    cpu_used,
    each,
    reply_follow,
    sample,
    timed_latencies_ms,
)
from bench.procfile import procfile_stack  # noqa: E402
from bench.resume import Stack, audit, common_arguments, finished, ws_open  # noqa: E402
from conversations.engine import eventlog  # noqa: E402

# clients, tokens per reply, tokens per second
SCENARIOS = {"burst": (200, 60, 20.0), "many": (1000, 300, 10.0)}
TTFT_P50_MS, TTFT_P99_MS = 300.0, 1000.0  # burst
DELIVERY_P99_MS, WORKER_RSS_MIB = 200.0, 400.0  # many
FIRST_TOKEN_DELAY = 0.2  # the fake upstream's default
TIMEOUT = 300.0


async def drive(stack: Stack, clients: list[Client], timeout: float) -> dict[str, float]:
    """Open every socket, then send every `message.create` at once and follow each reply
    for at most `timeout` s; the CPU cores each process used until the last reply ended."""
    web = stack.webs[0]

    async def open_socket(client: Client) -> None:
        client.ws = await ws_open(web, client.conversation, stack.key)

    async def follow(client: Client) -> None:
        await asyncio.wait_for(reply_follow(client, silence=timeout), timeout)

    await each(clients, open_socket, gate=20)  # 20 handshakes at a time, as bench.fanout
    pids = {"Daphne": web.process.pid, "the worker": stack.worker.process.pid}
    pids |= {"the fake upstream": stack.fake.pid, "the clients (this process)": os.getpid()}
    samples: list[Sample] = []
    sampler = asyncio.ensure_future(sample(pids, samples))
    await each(clients, follow)
    sampler.cancel()
    ends = [client.got[-1][0] for client in clients if finished(client.got)]
    await asyncio.gather(*(c.ws.close() for c in clients if c.ws), return_exceptions=True)
    return cpu_used(samples, max(ends, default=time.time()))


def first_delta(client: Client) -> float | None:
    return next((at for at, e in client.got if e["type"] == eventlog.MESSAGE_DELTA), None)


def upstream_starts(path: Path) -> dict[str, tuple[float, float]]:
    """(request received, first text chunk sent) per conversation id, from the fake's log."""
    found: dict[str, tuple[float, float]] = {}
    for line in path.read_text().splitlines():
        with contextlib.suppress(ValueError):  # a line being written
            entry = json.loads(line)
            sent = [at for kind, _, at in entry["chunks"] if kind == "text"]
            if (match := KEY.search(entry["user"] or "")) and sent:
                found[match[1]] = (entry["received_at"], sent[0])
    return found


def most_at_once(clients: list[Client]) -> int:
    """The most replies streaming at the same moment: first delta to last event, per client."""
    edges: list[tuple[float, int]] = []
    for client in clients:
        if (start := first_delta(client)) is not None:
            edges += [(start, 1), (client.got[-1][0], -1)]
    level = peak = 0
    for _, step in sorted(edges):
        level += step
        peak = max(peak, level)
    return peak


def spread(samples: list[float], scale: float = 1.0, digits: int = 0) -> str:
    """p50 / p99 of `samples` times `scale`."""
    return " / ".join(f"{pct(samples, q) * scale:.{digits}f}" for q in (50, 99))


def report(
    args: argparse.Namespace,
    clients: list[Client],
    stack: Stack,
    cpu: dict[str, float],
    kib: dict[str, int],
) -> None:
    audits = [audit(client.run_id, client.got) for client in clients]
    total = len(clients)
    completed = sum(
        finished(c.got) and c.got[-1][1]["type"] == eventlog.RUN_COMPLETED for c in clients
    )
    lost, dups = sum(a.lost for a in audits), sum(a.duplicated for a in audits)
    wrong = sum(a.problem == "text != stored message" for a in audits)
    pairs = zip(audits, clients, strict=True)
    problems = Counter((c.error or a.problem)[:120] for a, c in pairs if c.error or a.problem)
    starts = {c.conversation: (c.sent_at, at) for c in clients if (at := first_delta(c))}
    # A client without a first token by the cap counts as the cap: a lower bound.
    missing = total - len(starts)
    ttft = [(at - sent) * 1000 for sent, at in starts.values()] + [args.timeout * 1000] * missing
    done = [c for c in clients if finished(c.got)]
    completion = [c.got[-1][0] - c.sent_at for c in done]
    created = [(c.got[0][0] - c.sent_at) * 1000 for c in clients if c.got]
    chunks = chunk_times(stack.chunk_log, {c.conversation for c in done})
    timed = [t for c in clients for t in timed_latencies_ms(c.got, chunks.get(c.conversation, []))]
    latency = [ms for _, ms in timed]
    # Split where the last reply began: before it, runs were still being created and their
    # steps started while others streamed; after it, every reply only streams.
    all_started = max(starts.values(), key=lambda pair: pair[1], default=(0.0, math.inf))[1]
    ramp = [ms for at, ms in timed if at < all_started]
    steady = [ms for at, ms in timed if at >= all_started]
    upstream = upstream_starts(stack.chunk_log)
    legs: tuple[list[float], list[float], list[float]] = ([], [], [])
    for conversation, (sent, at) in starts.items():
        if conversation in upstream:
            received, chunk = upstream[conversation]
            for leg, ms in zip(legs, (received - sent, chunk - received, at - chunk), strict=True):
                leg.append(ms * 1000)
    burst, many = args.scenario == "burst", args.scenario == "many"
    at_once = most_at_once(clients)
    # Delivery and memory with fewer replies at once than asked say nothing of the target.
    all_at_once, partial = at_once == total, f"no verdict: {at_once} at once"
    p50, p99, delivery_p99 = pct(ttft, 50), pct(ttft, 99), pct(latency, 99)
    hwm = kib["worker VmHWM"] / 1024
    rows: list[Row] = [
        ("replies completed", f"{completed} / {total}", "all", completed == total),
        (
            "lost / duplicated events, streamed text != stored",
            f"{lost} / {dups} / {wrong}",
            "0 / 0 / 0" if burst else "",
            lost == dups == wrong == 0 if burst else None,
        ),
        ("time to first token p50 ms", f"{p50:.0f}", f"<= {TTFT_P50_MS:g}" if burst else "",
         p50 <= TTFT_P50_MS if burst else None),
        ("time to first token p90 ms", f"{pct(ttft, 90):.0f}", "", None),
        ("time to first token p99 ms", f"{p99:.0f}", f"<= {TTFT_P99_MS:g}" if burst else "",
         p99 <= TTFT_P99_MS if burst else None),
        ("time to first token max ms", f"{max(ttft, default=math.nan):.0f}", "", None),
        ("clients without a first token by the cap (counted as the cap)", missing, "", None),
        ("- sent -> upstream request received p50 / p99 ms", spread(legs[0]), "", None),
        ("- upstream's own first-token delay p50 / p99 ms", spread(legs[1]), "", None),
        ("- first chunk sent -> first delta received p50 / p99 ms", spread(legs[2]), "", None),
        ("sent -> run.created received p50 / p99 ms", spread(created), "", None),
        ("completion p50 / p99 s", spread(completion, digits=1), "", None),
        ("last reply done after s", f"{max(completion, default=math.nan):.1f}", "", None),
        ("replies streaming at once, most", at_once, str(total) if many else "",
         at_once == total if many else None),
        ("event delivery p50 ms", f"{pct(latency, 50):.1f}", "", None),
        ("event delivery p99 ms", f"{delivery_p99:.1f}", f"<= {DELIVERY_P99_MS:g}" if many else "",
         (delivery_p99 <= DELIVERY_P99_MS if all_at_once else partial) if many else None),
        ("event delivery max ms", f"{max(latency, default=math.nan):.1f}", "", None),
        ("- while replies were still starting, p50 / p99 ms", spread(ramp, digits=1), "", None),
        ("- once every reply was streaming, p50 / p99 ms", spread(steady, digits=1), "", None),
        ("worker peak RSS (VmHWM) MiB", f"{hwm:.0f}", f"<= {WORKER_RSS_MIB:g}" if many else "",
         (hwm <= WORKER_RSS_MIB if all_at_once else partial) if many else None),
        ("worker RSS after the warm-up MiB", f"{kib['worker warm'] / 1024:.0f}", "", None),
        ("Daphne peak RSS (VmHWM) MiB", f"{kib['Daphne VmHWM'] / 1024:.0f}", "", None),
        *((f"CPU cores used by {name}", f"{used:.2f}", "", None) for name, used in cpu.items()),
    ]  # fmt: skip
    table_print(rows)
    errors = Counter(STAMP.sub("", line)[:150] for line in stack.log_errors())
    print(f"\n{sum(problems.values())} clients failed or unchecked:")
    print("\n".join(f"- {n} x {problem}" for problem, n in problems.most_common(6)))
    print(f"{sum(errors.values())} ERROR lines in the worker and Daphne logs:")
    print("\n".join(f"- {n} x {line}" for line, n in errors.most_common(6)))
    print(f"load average now {os.getloadavg()[0]:.2f} (other processes share this host)")


def stream_scenario(args: argparse.Namespace, env: dict[str, str]) -> None:
    count, tokens, rate = SCENARIOS[args.scenario]
    count, tokens = args.clients or count, args.tokens or tokens
    rate = args.tokens_per_second or rate
    with procfile_stack(
        tokens=tokens, rate=rate, first_token_delay=args.first_token_delay, env=env
    ) as (stack, commands):
        threads = env.get("WORKER_CONCURRENCY", os.environ.get("WORKER_CONCURRENCY", "8"))
        print(
            f"bench.burst --scenario {args.scenario} on {connection.display_name} "
            f"({connection.settings_dict['NAME']}), {os.cpu_count()} CPUs, load average "
            f"{os.getloadavg()[0]:.2f}: {count} clients at once, one reply each of {tokens} "
            f"tokens at {rate:g}/s (first after {args.first_token_delay:g} s), one worker "
            f"({threads} threads), one Daphne, cap {args.timeout:g} s"
        )
        print("\n".join(f"  {name}: {command}" for name, command in commands.items()) + "\n")
        progress("warm-up: one socket, one reply")
        warm = [Client(stack.conversation())]
        uvloop.run(drive(stack, warm, args.timeout))
        if warm[0].error or audit(warm[0].run_id, warm[0].got).problem:
            progress(f"the warm-up reply failed ({warm[0].error}); measuring anyway")
        worker, web = stack.worker.process.pid, stack.webs[0].process.pid
        kib = {"worker warm": status_kib(worker)}
        clients = [Client(stack.conversation()) for _ in range(count)]
        progress(f"{count} sockets: connecting, then one message.create each, all at once")
        cpu = uvloop.run(drive(stack, clients, args.timeout))
        kib |= {
            "worker VmHWM": status_kib(worker, "VmHWM"),
            "Daphne VmHWM": status_kib(web, "VmHWM"),
        }
        progress("checking every reply against the run log and the stored message")
        report(args, clients, stack, cpu, kib)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenario", choices=["burst", "many", "chat"], default="burst")
    parser.add_argument("--worker-concurrency", type=int, help="WORKER_CONCURRENCY (8)")
    parser.add_argument("--clients", type=int, help="burst: 200, many: 1000")
    parser.add_argument("--tokens", type=int, help="tokens per reply (burst: 60, many: 300)")
    parser.add_argument("--tokens-per-second", type=float, help="burst: 20, many: 10")
    parser.add_argument("--first-token-delay", type=float, default=FIRST_TOKEN_DELAY)
    parser.add_argument("--timeout", type=float, default=TIMEOUT, help="cap in seconds")
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)), help="chat: messages")
    parser.add_argument("--calls", type=int, default=30, help="chat: timed calls per size")
    common_arguments(parser)
    args = parser.parse_args()
    numbers = (args.worker_concurrency, args.clients, args.tokens, args.tokens_per_second)
    if any(n is not None and n <= 0 for n in numbers) or min(args.timeout, args.calls) <= 0:
        parser.error("counts, rates, --timeout and --calls must be positive")
    if database_refused("burst", args.allow_sqlite):
        return 2
    call_command("migrate", interactive=False, verbosity=0)
    env = {}
    if args.worker_concurrency is not None:
        env["WORKER_CONCURRENCY"] = str(args.worker_concurrency)
    if args.scenario == "chat":
        sizes = sorted({int(size) for size in args.sizes.split(",")})
        chat_scenario(sizes, args.calls, env)
    else:
        stream_scenario(args, env)
    return 0


if __name__ == "__main__":
    sys.exit(main())
