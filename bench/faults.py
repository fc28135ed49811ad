"""Fault trials: dependencies that go away for a while as replies stream.

Real processes: a Celery worker started as the Procfile starts it (threads pool), a
Redis-protocol server this benchmark owns (so it can restart it), the database in
DATABASE_URL and the fake OpenAI-compatible upstream. Each trial starts a few runs that
stream a reply of a few seconds, injects one fault at a random moment, then sweeps the
watchdog (as beat does) until every run has ended, and tallies what happened:

- redis: the Redis server stopped and started again two seconds later (its data gone);
- database: every database connection of the worker dropped (pg_terminate_backend);
- stall / cut / garbage: the upstream sends nothing for longer than the client's
  timeout, closes the connection, or answers a chunk that is not JSON, mid-stream.

A run passes when it ends `completed` with the whole reply stored and its streamed text
equal to the stored one, or `failed` with a code and no partial reply stored; it fails the
trial when it is still active after the sweeps, or the worker process exited. The exit
code is 1 if any trial failed. It runs on PostgreSQL; with --allow-sqlite also on SQLite,
without the database trials (dropping another process's connections needs a server).

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/parley_faults \\
        .venv/bin/python -m bench.faults [--redis 20] [--database 10] [--upstream 4]
"""

import argparse
import secrets
import shutil
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from random import Random

from bench.common import database_refused, django_setup, owner_delete, process_stop, progress

django_setup()

from django.conf import settings  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402

from accounts.models import User  # noqa: E402
from conversations import engine, services  # noqa: E402
from conversations.engine import eventlog, watchdog  # noqa: E402
from conversations.models import Message, Run  # noqa: E402
from tests.support.fake_openai import FakeOpenAI, Script  # noqa: E402
from tests.support.faults import RestartableRedis, procfile_worker, redis_switched  # noqa: E402
from tests.support.processes import ChildProcess  # noqa: E402

STORY = "Once upon a time a worker kept on streaming through the storm. " * 4
RATE = 40.0  # tokens per second: a reply of about four seconds
RUNS_PER_TRIAL = 3
CLIENT_TIMEOUT = 2  # the worker's OPENAI_TIMEOUT_SECONDS, so a stall shows quickly
SETTLE_SECONDS = 90.0
EXPECTED_CODES = {
    "stall": "provider_timeout",
    "cut": "connection_error",
    "garbage": "provider_error",
}


@dataclass
class Tally:
    trials: int = 0
    runs: Counter[str] = field(default_factory=Counter)
    failures: list[str] = field(default_factory=list)
    recovery: list[float] = field(default_factory=list)


class Bench:
    def __init__(self, redis: RestartableRedis, fake: FakeOpenAI, owner: User) -> None:
        self.redis, self.fake, self.owner = redis, fake, owner
        self.worker: ChildProcess | None = None
        self.started: list[ChildProcess] = []  # every worker, a fresh one after an exit

    def worker_up(self) -> ChildProcess:
        if self.worker is None or self.worker.process.poll() is not None:
            self.worker = procfile_worker(
                redis_url=self.redis.url,
                env={
                    "OPENAI_API_KEY": "test-key",
                    "OPENAI_BASE_URL": self.fake.base_url,
                    "OPENAI_MAX_RETRIES": "0",
                    "OPENAI_TIMEOUT_SECONDS": str(CLIENT_TIMEOUT),
                    "PARLEY_RUN_LEASE_SECONDS": "3",
                },
            )
            self.started.append(self.worker)
        return self.worker

    def start_runs(self, label: str) -> list[Run]:
        runs = []
        for index in range(RUNS_PER_TRIAL):
            chat = services.conversation_create(owner=self.owner, title=f"{label} {index}")
            runs.append(engine.run_start(conversation=chat, content=f"Tell story {index}")[1])
        return runs

    def settle(self, runs: list[Run]) -> float:
        """Sweep as beat would until every run ended; seconds it took (inf if never)."""
        started = time.monotonic()
        ids = [run.pk for run in runs]
        while time.monotonic() - started < SETTLE_SECONDS:
            try:
                watchdog.runs_watchdog()
            except Exception as exc:  # Redis may still be coming back
                progress(f"  watchdog sweep failed: {type(exc).__name__}")
                connection.close()
            if not Run.objects.filter(pk__in=ids, status__in=Run.ACTIVE_STATUSES).exists():
                return time.monotonic() - started
            time.sleep(1.0)
        return float("inf")

    def judge(self, runs: list[Run], tally: Tally, *, label: str, failed_code: str = "") -> None:
        worker = self.worker
        if worker is None or worker.process.poll() is not None:
            tally.failures.append(f"{label}: the worker exited")
        for run in runs:
            run.refresh_from_db()
            replies = list(Message.objects.filter(run=run, role="assistant"))
            if run.status == Run.Status.COMPLETED:
                log = eventlog.events_all(str(run.id))
                streamed = eventlog.message_texts(log)
                if [m.content for m in replies] != [STORY]:
                    tally.failures.append(f"{label}: run {run.pk} stored an incomplete reply")
                elif (
                    log
                    and log[-1]["type"] == "run.completed"
                    and (streamed.get(str(replies[0].pk)) != STORY)
                ):
                    tally.failures.append(f"{label}: run {run.pk} streamed != stored")
                tally.runs["completed"] += 1
            elif run.status == Run.Status.FAILED:
                code = (run.error or {}).get("code", "")
                tally.runs[f"failed: {code or 'no code'}"] += 1
                if not code or replies:
                    tally.failures.append(f"{label}: run {run.pk} failed without code or kept text")
                if failed_code and code != failed_code:
                    tally.failures.append(f"{label}: run {run.pk} failed {code}, not {failed_code}")
            else:
                tally.runs[f"still {run.status}"] += 1
                tally.failures.append(f"{label}: run {run.pk} still {run.status}")

    def trial(self, kind: str, rng: Random, tally: Tally) -> None:
        tally.trials += 1
        label = f"{kind} #{tally.trials}"
        self.worker_up()
        self.fake.default_script = upstream_script(kind, rng)
        runs = self.start_runs(label)
        time.sleep(rng.uniform(0.1, len(STORY) / 4 / RATE))
        if kind == "redis":
            self.redis.restart(down_seconds=2.0)
        elif kind == "database":
            drop_database_connections()
        took = self.settle(runs)
        tally.recovery.append(took)
        self.judge(runs, tally, label=label, failed_code=EXPECTED_CODES.get(kind, ""))
        progress(f"{label}: {dict(tally.runs)}, {len(tally.failures)} failures so far")


def upstream_script(kind: str, rng: Random) -> Script:
    chunks = int(len(STORY) / 4)
    at = rng.randint(2, chunks - 2)
    if kind == "stall":
        return Script(text=STORY, tokens_per_second=RATE, stall_after_chunks=at,
                      stall_seconds=CLIENT_TIMEOUT + 2)  # fmt: skip
    if kind == "cut":
        return Script(text=STORY, tokens_per_second=RATE, cut_after_chunks=at)
    if kind == "garbage":
        return Script(text=STORY, tokens_per_second=RATE, garbage_after_chunks=at)
    return Script(text=STORY, tokens_per_second=RATE)


def drop_database_connections() -> None:
    """What a database restart or a failover does to the worker's connections."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--redis", type=int, default=20, help="Redis restarts")
    parser.add_argument("--database", type=int, default=10, help="database connection drops")
    parser.add_argument("--upstream", type=int, default=4, help="trials of each upstream fault")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--allow-sqlite", action="store_true", help="run on a non-PostgreSQL DB")
    args = parser.parse_args()
    if database_refused("faults", args.allow_sqlite):
        return 2
    if args.database and connection.vendor != "postgresql":
        progress("bench.faults drops database connections on PostgreSQL only: pass --database 0")
        return 2
    call_command("migrate", verbosity=0)
    settings.PARLEY_RUN_QUEUED_GRACE_SECONDS = 3  # a lost queue is noticed by the next sweeps
    rng = Random(args.seed)
    plan = [("redis", args.redis), ("database", args.database)] + [
        (kind, args.upstream) for kind in ("stall", "cut", "garbage")
    ]
    redis = RestartableRedis()
    redis.start()
    tallies: dict[str, Tally] = {}
    try:
        with redis_switched(redis.url), FakeOpenAI() as fake:
            owner = User.objects.create_user(username=f"faults-{secrets.token_hex(6)}")
            bench = Bench(redis, fake, owner)
            try:
                for kind, count in [(kind, count) for kind, count in plan if count]:
                    tally = tallies.setdefault(kind, Tally())
                    for _ in range(count):
                        bench.trial(kind, rng, tally)
            finally:
                for worker in bench.started:
                    process_stop(worker)
                owner_delete(owner)
            report(tallies)
    finally:
        redis.stop()
        shutil.rmtree(redis.data_dir, ignore_errors=True)
    return 1 if any(t.failures for t in tallies.values()) else 0


def report(tallies: dict[str, Tally]) -> None:
    print(
        f"\nbench.faults: {RUNS_PER_TRIAL} runs a trial, replies of ~{len(STORY) / 4 / RATE:.0f} s"
    )
    print("| fault | trials | runs ended | stuck | failures | recovery p50 / max s | verdict |")
    print("|---|---:|---|---:|---:|---:|---|")
    for kind, tally in tallies.items():
        ended = ", ".join(f"{name} {n}" for name, n in sorted(tally.runs.items()))
        stuck = sum(n for name, n in tally.runs.items() if name.startswith("still"))
        finite = sorted(t for t in tally.recovery if t != float("inf")) or [float("inf")]
        median = finite[len(finite) // 2]
        verdict = "PASS" if not tally.failures else "FAIL"
        print(f"| {kind} | {tally.trials} | {ended} | {stuck} | {len(tally.failures)} "
              f"| {median:.1f} / {max(tally.recovery or [0]):.1f} | {verdict} |")  # fmt: skip
    for tally in tallies.values():
        for failure in tally.failures:
            print(f"- {failure}")


if __name__ == "__main__":
    sys.exit(main())
