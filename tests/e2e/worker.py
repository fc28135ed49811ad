"""Start and kill real Celery worker processes for end-to-end tests."""

import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from django.db import connection

ROOT = Path(__file__).resolve().parents[2]


def database_url_for_tests() -> str:
    """The URL of the database the test run uses (pytest-django's test database)."""
    settings = connection.settings_dict
    if connection.vendor == "sqlite":
        return f"sqlite:///{settings['NAME']}"
    user = settings.get("USER") or ""
    password = f":{settings['PASSWORD']}" if settings.get("PASSWORD") else ""
    host = settings.get("HOST") or "127.0.0.1"
    port = settings.get("PORT") or 5432
    return f"postgres://{user}{password}@{host}:{port}/{settings['NAME']}"


@dataclass
class Worker:
    process: subprocess.Popen[bytes]
    log_path: Path
    started: float = field(default_factory=time.monotonic)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def kill(self) -> None:
        """SIGKILL, no warning: the step in flight dies mid-way."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()


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
    handle, name = tempfile.mkstemp(prefix="parley-worker-", suffix=".log")
    log_file = os.fdopen(handle, "wb")
    full_env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "config.settings.test",
        "DATABASE_URL": database_url_for_tests(),
        "REDIS_URL": redis_url,
        "PYTHONUNBUFFERED": "1",
        **env,
    }
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
    process = subprocess.Popen(
        command,
        cwd=ROOT,
        env=full_env,
        stdout=log_file,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    log_file.close()  # the child holds its own copy of the descriptor
    worker = Worker(process=process, log_path=Path(name))
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if "ready." in worker.log():
            return worker
        if process.poll() is not None:
            raise RuntimeError(f"worker exited early:\n{worker.log()}")
        time.sleep(0.1)
    worker.stop()
    raise RuntimeError(f"worker did not become ready:\n{worker.log()}")
