"""Start and kill real Celery worker processes for end-to-end tests."""

import sys
from collections.abc import Callable
from pathlib import Path

from tests.support.processes import (
    ROOT,
    ChildProcess,
    database_url_for_tests,
    process_spawn,
    process_wait_ready,
)

__all__ = [
    "ROOT",
    "ChildProcess",
    "Worker",
    "WorkerFactory",
    "beat_start",
    "database_url_for_tests",
    "worker_start",
]


class Worker(ChildProcess):
    """A Celery worker; `kill()` is the crash the kill tests need."""


WorkerFactory = Callable[..., Worker]  # starts one more worker with extra environment


def worker_start(
    *,
    redis_url: str,
    env: dict[str, str],
    include: str = "",
    pool: str = "solo",
    concurrency: int = 1,
) -> Worker:
    """A real worker process. The default solo pool makes the worker the process that runs
    steps (what kill tests need); benchmarks pass e.g. `pool="threads", concurrency=50`,
    as the Procfile's worker runs (`concurrency` is ignored by the solo pool)."""
    command = [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "config",
        "worker",
        f"--pool={pool}",
        "--loglevel=INFO",
        "--without-gossip",
        "--without-mingle",
        "--without-heartbeat",
        "-Q",
        "parley",
    ]
    if pool != "solo":
        command.append(f"--concurrency={concurrency}")
    if include:
        command += ["--include", include]
    process, log_path = process_spawn(name="worker", command=command, redis_url=redis_url, env=env)
    worker = Worker(process=process, log_path=log_path)
    process_wait_ready(worker, "worker", lambda: "ready." in worker.log())
    return worker


def beat_start(*, redis_url: str, env: dict[str, str], schedule: Path) -> ChildProcess:
    """A real Celery beat, as `make run` starts one: it sends the watchdog (and retention)
    tasks on their schedule (PARLEY_WATCHDOG_SECONDS in `env` sets the watchdog's)."""
    command = [
        sys.executable, "-m", "celery", "-A", "config", "beat", "--loglevel=INFO",
        "--schedule", str(schedule),
    ]  # fmt: skip
    process, log_path = process_spawn(name="beat", command=command, redis_url=redis_url, env=env)
    beat = ChildProcess(process=process, log_path=log_path)
    process_wait_ready(beat, "beat", lambda: "beat: Starting" in beat.log())
    return beat
