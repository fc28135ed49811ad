"""`bench.burst --scenario chat`: `POST /api/v1/chat/` end to end with a zero-latency
upstream, on conversations of 10 / 10,000 / 50,000 messages (issue 19's targets: p50 <= 25
/ 50 / 50 ms).

The conversations are seeded by bulk insert on their root branch with bench.state's
`build_conversation` (~200-character prose, tool-call groups in 40% of turns, a completed
run per user turn), then analysed. Each size has a bench user of its own (the API's model
budget, PARLEY_API_MODEL_THROTTLE_RATE, is 60 requests a minute per user); a size below
1,000 gets a fresh conversation per call, so that every call sees that many messages (each
call adds two). After two warm-up calls per size, `--calls` calls per size are timed
round-robin over the sizes, one at a time on one keep-alive HTTP connection to Daphne: from
sending the request to the whole answer read, which must be a 200 with the run completed.
The fake upstream answers 20 tokens with no delay. Each call's message carries a marker that
the fake's chunk log echoes, which splits the time into: to the upstream (Daphne creates the
run and queues the step; the worker takes it, builds the model input and sends the request)
and after the upstream's last chunk (the reply stored, the run ended, Daphne's wait woken,
the answer sent). CPU per call of Daphne and of the worker from /proc (10 ms ticks, so a
mean over the calls; the worker's includes beat's watchdog sweeps meanwhile).

Run through bench.burst, which starts the processes as the Procfile does:

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/parley_burst \\
        .venv/bin/python -m bench.burst --scenario chat [--sizes 10,10000,50000 --calls 30]
"""

import contextlib
import json
import os
import re
import secrets
import time
import uuid
from dataclasses import dataclass, field
from http.client import HTTPConnection
from pathlib import Path
from random import Random

from django.db import connection

from accounts.models import User
from accounts.services import api_key_create
from bench.common import analyze, cpu_seconds, owner_delete, pct, progress
from bench.procfile import procfile_stack
from bench.resume import Stack
from bench.state import build_conversation
from config.settings.base import CACHES
from conversations.engine import eventlog
from conversations.models import Conversation, Message, Run

SIZES = (10, 10_000, 50_000)
TARGETS_MS = {10: 25.0, 10_000: 50.0, 50_000: 50.0}
CHAT_TOKENS = 20
WARM_UP = 2
FRESH_BELOW = 1000  # smaller conversations: a fresh one per call
MARKER = "bench-burst-chat"
KEY = re.compile(rf"{MARKER} ([0-9a-f-]{{36}})")


@dataclass
class Call:
    marker: str
    sent: float  # wall clock, when the request was sent
    done: float  # wall clock, when the answer was read
    ms: float
    cpu: tuple[float, float]  # seconds of Daphne's and the worker's CPU meanwhile


@dataclass
class Size:
    messages: int
    key: str
    conversations: list[str]
    calls: list[Call] = field(default_factory=list)


def chat_call(http: HTTPConnection, stack: Stack, key: str, conversation: str) -> Call:
    marker = str(uuid.uuid4())
    body = json.dumps({"message": f"{MARKER} {marker}", "conversation_id": conversation})
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    pids = (stack.webs[0].process.pid, stack.worker.process.pid)
    before = [cpu_seconds(pid) for pid in pids]
    sent, started = time.time(), time.perf_counter()
    http.request("POST", "/api/v1/chat/", body, headers)
    response = http.getresponse()
    data = response.read()
    ms = (time.perf_counter() - started) * 1000
    done = time.time()
    web, worker = (cpu_seconds(pid) - cpu for pid, cpu in zip(pids, before, strict=True))
    if response.status != 200 or json.loads(data).get("status") != "completed":
        raise RuntimeError(f"POST chat/ answered {response.status}: {data[:300]!r}")
    return Call(marker, sent, done, ms, (web, worker))


def upstream_times(path: Path, markers: set[str]) -> dict[str, tuple[float, float]]:
    """(request received, last chunk sent) per call marker, from the fake's chunk log (a
    request is logged just after its answer ends: wait for the last ones)."""
    found: dict[str, tuple[float, float]] = {}
    deadline = time.monotonic() + 10
    while not markers <= found.keys() and time.monotonic() < deadline:
        for line in path.read_text().splitlines():
            with contextlib.suppress(ValueError):  # a line being written
                entry = json.loads(line)
                if (match := KEY.search(entry["user"] or "")) and entry["chunks"]:
                    found[match[1]] = (entry["received_at"], entry["chunks"][-1][2])
        time.sleep(0.1)
    return found


def seed(owner: User, messages: int, count: int, rng: Random) -> list[str]:
    progress(f"seeding {count} conversation(s) of {messages:,} messages")
    conversations = [build_conversation(owner, messages, rng) for _ in range(count)]
    return [str(conversation.pk) for conversation in conversations]


def keys_delete(pattern: str) -> None:
    client = eventlog.redis_client()
    for key in client.scan_iter(match=pattern):
        client.delete(key)


def sizes_seed(
    stack: Stack, sizes: list[int], calls: int, cleanup: contextlib.ExitStack
) -> list[Size]:
    """A user with an API key per size (the first is the stack's), and its conversations."""
    rng = Random(20240601)
    seeded = []
    prefix = CACHES["default"].get("KEY_PREFIX", "")
    for index, messages in enumerate(sizes):
        owner, key = stack.owner, stack.key
        if index:
            owner = User.objects.create_user(username=f"bench-{secrets.token_hex(6)}")
            cleanup.callback(owner_delete, owner)
            key = api_key_create(owner=owner, name="bench")[1]
        # The request budgets' counters, one per bucket (Django's cache keys: prefix,
        # version, key; conversations/limits.py).
        for scope in ("user", "model"):
            cleanup.callback(keys_delete, f"{prefix}:1:throttle_{scope}_{owner.pk}_*")
        count = WARM_UP + calls if messages < FRESH_BELOW else 1
        seeded.append(Size(messages, key, seed(owner, messages, count, rng)))
    analyze(Conversation, Message, Run)
    return seeded


def report(seeded: list[Size], upstream: dict[str, tuple[float, float]]) -> None:
    print(
        "| messages | calls | p50 ms | p90 ms | target p50 | result | to upstream p50 ms "
        "| after upstream p50 ms | CPU ms per call: Daphne / worker |"
    )
    print("|---:|---:|---:|---:|---|---|---:|---:|---:|")
    for size in seeded:
        ms = [call.ms for call in size.calls]
        to = [(upstream[c.marker][0] - c.sent) * 1000 for c in size.calls if c.marker in upstream]
        after = [
            (c.done - upstream[c.marker][1]) * 1000 for c in size.calls if c.marker in upstream
        ]
        web, worker = (sum(c.cpu[i] for c in size.calls) * 1000 / len(ms) for i in (0, 1))
        target = TARGETS_MS.get(size.messages)
        verdict = "" if target is None else "PASS" if pct(ms, 50) <= target else "FAIL"
        print(
            f"| {size.messages:,} | {len(ms)} | {pct(ms, 50):.1f} | {pct(ms, 90):.1f} "
            f"| {f'<= {target:g}' if target else ''} | {verdict} | {pct(to, 50):.1f} "
            f"| {pct(after, 50):.1f} | {web:.1f} / {worker:.1f} |"
        )
    print(f"\nload average now {os.getloadavg()[0]:.2f} (other processes share this host)")


def chat_scenario(sizes: list[int], calls: int, env: dict[str, str]) -> None:
    with (
        procfile_stack(tokens=CHAT_TOKENS, rate=0, first_token_delay=0, env=env) as (
            stack,
            commands,
        ),
        contextlib.ExitStack() as cleanup,
    ):
        print(
            f"bench.burst --scenario chat on {connection.display_name} "
            f"({connection.settings_dict['NAME']}), {os.cpu_count()} CPUs, load average "
            f"{os.getloadavg()[0]:.2f}: POST /api/v1/chat/, the upstream answering "
            f"{CHAT_TOKENS} tokens at once; {WARM_UP} warm-up and {calls} timed calls per "
            "size, round-robin, one at a time"
        )
        print("\n".join(f"  {name}: {command}" for name, command in commands.items()) + "\n")
        seeded = sizes_seed(stack, sizes, calls, cleanup)
        http = HTTPConnection("127.0.0.1", stack.webs[0].port, timeout=120)
        cleanup.callback(http.close)
        progress(f"{WARM_UP} warm-up and {calls} timed calls per size")
        for turn in range(WARM_UP + calls):
            for size in seeded:
                conversation = size.conversations[turn % len(size.conversations)]
                call = chat_call(http, stack, size.key, conversation)
                if turn >= WARM_UP:
                    size.calls.append(call)
        markers = {call.marker for size in seeded for call in size.calls}
        report(seeded, upstream_times(stack.chunk_log, markers))
