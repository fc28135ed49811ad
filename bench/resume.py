"""Resume chaos check: cut the websocket at random points of live replies, resume with
`?run_id=<id>&after=<n>`, and check that nothing is lost, doubled or changed.

Each trial opens a socket to Daphne A, sends `message.create` (a reply of ~200 tokens at ~100
tokens/s from the fake upstream), reads a random number (0-5) of run events, then drops the
connection: mostly abruptly (the TCP socket closed without a websocket close frame,
`transport.abort()`), sometimes with a clean close. After a random 0-300 ms it reconnects with
the last sequence number seen, to A or to a second Daphne B at random (any web process serves
any run), reads another 0-5 events, and so on until the terminal event. Then: no gap, no
duplicate (against the run's log in Redis), and the text rebuilt from the events equals the
stored assistant message. Trial i uses seed S+i: `--seed S --trials 1` replays the first.

Real processes: the fake upstream (`tests.support.fake_openai_server`), a Celery worker
(threads pool), two Daphnes, Redis (REDIS_URL, or an embedded Valkey), the database in
DATABASE_URL (PostgreSQL; SQLite only with --allow-sqlite), migrated first. The user, its API
key, conversations and run logs are deleted and the processes stopped at the end, also on
error. bench.fanout reuses this harness (stack_up, ws_open, read_run, audit). Exit code 1 if
any trial failed.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/parley_fanout \\
        .venv/bin/python -m bench.resume [--trials 50 --seed S --tokens 200]
"""

import argparse
import asyncio
import contextlib
import itertools
import json
import math
import os
import random
import secrets
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from bench.common import (
    database_refused,
    django_setup,
    fake_start,
    owner_delete,
    process_stop,
    progress,
)

django_setup()

from django.conf import settings  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402
from websockets.asyncio.client import ClientConnection, connect  # noqa: E402

from accounts.models import User  # noqa: E402
from accounts.services import api_key_create  # noqa: E402
from conversations import notifications, services  # noqa: E402
from conversations.engine import eventlog  # noqa: E402
from conversations.models import Message, Run  # noqa: E402
from tests.support.redis_server import redis_start  # noqa: E402
from tests.support.web_server import WebServer, web_start  # noqa: E402
from tests.support.workers import Worker, worker_start  # noqa: E402

TOKENS, TOKENS_PER_SECOND = 200, 100.0
# Run events read per connection: 0..MAX_READ (--max-read). A reply is about 14 events
# (deltas are coalesced), so this cuts most replies several times.
MAX_READ = 5
MAX_PAUSE = 0.3  # seconds between a cut and the reconnection: 0..MAX_PAUSE
ABORT_SHARE = 0.75  # cuts without a close frame; the others close cleanly
MAX_CUTS = 200
TRIAL_TIMEOUT = 120.0
SILENCE_SECONDS = 60.0  # read_run gives up after this long without a frame
Timed = list[tuple[float, eventlog.Event]]  # (wall-clock receive time, run event)


def common_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--allow-sqlite", action="store_true", help="run on a non-PostgreSQL DB")


# --- the processes ---------------------------------------------------------------------


@dataclass
class Stack:
    owner: User
    key: str  # the owner's API key, for the sockets' Authorization header
    webs: list[WebServer]
    worker: Worker
    fake: subprocess.Popen[str]
    chunk_log: Path

    def log_errors(self) -> list[str]:
        processes: list[Worker | WebServer] = [self.worker, *self.webs]
        lines = [line for p in processes for line in p.log().splitlines()]
        return [line for line in lines if "ERROR" in line]

    def conversation(self) -> str:
        return str(services.conversation_create(owner=self.owner).pk)


@contextlib.contextmanager
def stack_up(tokens: int, rate: float, concurrency: int, webs: int = 1) -> Iterator[Stack]:
    """Redis, the fake upstream, a bench user with an API key, one worker (threads pool) and
    `webs` Daphnes; all undone in reverse order on the way out, also on error."""
    with contextlib.ExitStack() as cleanup:
        cleanup.callback(redis_start()[1])
        handle, name = tempfile.mkstemp(prefix="parley-chunks-", suffix=".jsonl")
        os.close(handle)
        chunk_log = Path(name)
        cleanup.callback(chunk_log.unlink, missing_ok=True)
        fake, base_url = fake_start(tokens=tokens, rate=rate, chunk_log=chunk_log)
        cleanup.callback(fake.wait, timeout=10)
        cleanup.callback(fake.terminate)
        owner = User.objects.create_user(username=f"bench-{secrets.token_hex(6)}")
        cleanup.callback(owner_delete, owner)
        env = {"OPENAI_API_KEY": "bench", "OPENAI_BASE_URL": base_url, "OPENAI_MAX_RETRIES": "0"}
        url = settings.REDIS_URL
        worker = worker_start(redis_url=url, env=env, pool="threads", concurrency=concurrency)
        cleanup.callback(process_stop, worker)
        servers = []
        for _ in range(webs):
            servers.append(web_start(redis_url=url))
            cleanup.callback(process_stop, servers[-1])
        key = api_key_create(owner=owner, name="bench")[1]
        stack = Stack(owner, key, servers, worker, fake, chunk_log)
        try:
            yield stack
        except BaseException:
            progress("failed; error lines in the logs:\n" + "\n".join(stack.log_errors()[-20:]))
            raise


# --- sockets and checks ------------------------------------------------------------------


async def ws_open(web: WebServer, conversation: str, key: str, query: str = "") -> ClientConnection:
    url = f"{web.ws_url}/ws/conversations/{conversation}/{query}"
    ws = await connect(url, additional_headers={"Authorization": f"Bearer {key}"}, open_timeout=60)
    hello = json.loads(await asyncio.wait_for(ws.recv(), 30))
    if hello.get("type") != "conversation.connected":
        await ws.close()
        raise RuntimeError(f"unexpected first frame: {hello}")
    return ws


def finished(got: Timed) -> bool:
    return bool(got) and got[-1][1]["type"] in eventlog.TERMINAL_TYPES


async def read_run(
    ws: ClientConnection,
    got: Timed,
    *,
    run_id: str | None = None,
    limit: float = math.inf,
    silence: float = SILENCE_SECONDS,
) -> str | None:
    """Append run events to `got` until the terminal one, or until `limit` new ones and the
    run id is known (from an event or the run_started notification); returns the run id.
    Raises TimeoutError after `silence` seconds without a frame."""
    new = 0
    while not (new >= limit and run_id):
        frame = json.loads(await asyncio.wait_for(ws.recv(), silence))
        at = time.time()
        if frame.get("type") == notifications.RUN_STARTED:
            run_id = run_id or frame["run"]["id"]
        if "sequence_number" not in frame:
            continue  # a conversation notification
        run_id, new = frame["run_id"], new + 1
        got.append((at, frame))
        if finished(got):
            break
    return run_id


@dataclass
class Audit:
    lost: int  # sequence numbers missing before the last one received (or the log's end)
    duplicated: int  # sequence numbers received more than once
    problem: str = ""  # "" when the run completed and the rebuilt text equals the stored one


def audit(run_id: str | None, got: Timed) -> Audit:
    seqs = [event["sequence_number"] for _, event in got]
    result = Audit(0, len(seqs) - len(set(seqs)), "no run id seen")
    if run_id is None:
        return result
    logged = eventlog.redis_client().xlen(eventlog.stream_key(run_id)) if finished(got) else 0
    result.lost = len(set(range(max(logged, max(seqs, default=-1) + 1))) - {*seqs})
    run = Run.objects.get(pk=run_id)
    reply = Message.objects.filter(run=run, role=Message.Role.ASSISTANT).first()
    text = eventlog.message_texts(event for _, event in got).get(str(reply.pk)) if reply else None
    result.problem = (
        "no terminal event" if not finished(got)
        else "out of order or repeated" if any(b <= a for a, b in itertools.pairwise(seqs))
        else f"run {run.status}" if run.status != Run.Status.COMPLETED
        else "text != stored message" if reply is None or text != reply.content
        else ""
    )  # fmt: skip
    return result


# --- the chaos check ---------------------------------------------------------------------


@dataclass
class Trial:
    number: int
    seed: int
    max_read: int
    cuts: list[tuple[bool, int]] = field(default_factory=list)  # (aborted, next web index)
    got: Timed = field(default_factory=list)
    run_id: str | None = None
    result: str = ""


async def trial_run(trial: Trial, stack: Stack, conversation: str) -> None:
    rng = random.Random(trial.seed)
    ws = await ws_open(stack.webs[0], conversation, stack.key)
    await ws.send(json.dumps({"type": "message.create", "content": "Tell me a long story"}))
    while True:
        limit = rng.randint(0, trial.max_read)
        trial.run_id = await read_run(ws, trial.got, run_id=trial.run_id, limit=limit)
        if finished(trial.got) or len(trial.cuts) >= MAX_CUTS:
            await ws.close()
            return
        aborted = rng.random() < ABORT_SHARE
        if aborted:
            ws.transport.abort()  # no close frame: the TCP connection just ends
        else:
            await ws.close()
        await asyncio.sleep(rng.uniform(0, MAX_PAUSE))
        web = rng.randrange(len(stack.webs))
        trial.cuts.append((aborted, web))
        after = trial.got[-1][1]["sequence_number"] if trial.got else -1
        query = f"?run_id={trial.run_id}&after={after}"
        ws = await ws_open(stack.webs[web], conversation, stack.key, query)


def trial_check(trial: Trial, stack: Stack) -> None:
    conversation = stack.conversation()
    try:
        asyncio.run(asyncio.wait_for(trial_run(trial, stack, conversation), TRIAL_TIMEOUT))
    except Exception as exc:
        trial.result = repr(exc)[:100]
    checked = audit(trial.run_id, trial.got)
    counts = {"lost": checked.lost, "duplicated": checked.duplicated}
    problems = [trial.result, checked.problem, *(f"{n} {what}" for what, n in counts.items() if n)]
    trial.result = "FAIL: " + "; ".join(filter(None, problems)) if any(problems) else "ok"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=50)
    parser.add_argument("--seed", type=int, default=random.randrange(1, 10**6))
    parser.add_argument("--max-read", type=int, default=MAX_READ, help="events per connection")
    parser.add_argument("--tokens", type=int, default=TOKENS, help="tokens per reply")
    parser.add_argument("--tokens-per-second", type=float, default=TOKENS_PER_SECOND)
    common_arguments(parser)
    args = parser.parse_args()
    if args.trials < 1 or args.max_read < 0 or min(args.tokens, args.tokens_per_second) <= 0:
        parser.error("--trials and the reply's size and rate must be >= 1, --max-read >= 0")
    if database_refused("resume", args.allow_sqlite):
        return 2
    call_command("migrate", interactive=False, verbosity=0)
    trials = [Trial(n, args.seed + n, args.max_read) for n in range(args.trials)]
    with stack_up(args.tokens, args.tokens_per_second, 2, webs=2) as stack:
        print(
            f"bench.resume on {connection.display_name}, {os.cpu_count()} CPUs: {args.trials} "
            f"trials, seed {args.seed}, replies of {args.tokens} tokens at "
            f"{args.tokens_per_second:g}/s, "
            f"0-{args.max_read} events per connection, Daphnes A and B\n"
        )
        print("| trial | seed | cuts | aborts | to B | events | result |")
        print("|---:|---:|---:|---:|---:|---:|---|")
        for trial in trials:
            trial_check(trial, stack)
            aborts, to_b = sum(a for a, _ in trial.cuts), sum(web for _, web in trial.cuts)
            cells = (trial.number, trial.seed, len(trial.cuts), aborts, to_b, len(trial.got))
            print("| " + " | ".join(map(str, (*cells, trial.result))) + " |", flush=True)
    failed = [trial for trial in trials if trial.result != "ok"]
    cuts = [cut for trial in trials for cut in trial.cuts]
    print(
        f"\n{len(trials) - len(failed)} of {len(trials)} trials passed, {len(failed)} failed; "
        f"{len(cuts)} cuts ({sum(aborted for aborted, _ in cuts)} without a close frame), "
        f"{sum(web for _, web in cuts)} reconnections to Daphne B, "
        f"{sum(len(trial.got) for trial in trials)} run events"
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
