"""The processes of `make run`, started for a benchmark exactly as the Procfile starts them.

Each command line is the Procfile's own, read from the file at start, `${NAME:-default}`
filled in from this process's environment plus the overrides a benchmark passes (the free
port Daphne binds, `WORKER_CONCURRENCY`, where beat keeps its schedule); nothing else is
added. The processes run with the settings module the Procfile's processes get
(`config.settings.local`, which `config/asgi.py` and `config/celery.py` default to), the
database and Redis of this benchmark, and the environment as it is otherwise: all of
Parley's settings at their defaults unless the caller's shell sets them. As `make run`
does, each web and worker process counts its metrics into a shared
`PROMETHEUS_MULTIPROC_DIR` (a temporary directory here).

The Procfile's `valkey` entry is not used: Redis is `REDIS_URL` or an embedded Valkey of
this benchmark's own, as for the other benchmarks (`tests.support.redis_server.redis_start`).
A `REDIS_URL` must not be shared with other workers (they would take this benchmark's
steps, and its worker theirs); steps left queued when a capped run ends are removed
from it at the end.
"""

import contextlib
import os
import re
import secrets
import shlex
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from django.conf import settings

from accounts.models import User
from accounts.services import api_key_create
from bench.common import ROOT, fake_start, owner_delete, process_stop, progress
from bench.resume import Stack
from conversations.engine import eventlog
from conversations.models import Run
from tests.support.processes import ChildProcess, process_spawn, process_wait_ready
from tests.support.redis_server import redis_start
from tests.support.web_server import WebServer, free_port
from tests.support.workers import Worker

PROCFILE = ROOT / "Procfile"
SETTINGS_MODULE = "config.settings.local"  # what the Procfile's processes run with
VARIABLE = re.compile(r"\$\{(\w+)(?::-([^}]*))?\}|\$(\w+)")
UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def procfile_command(name: str, env: dict[str, str]) -> list[str]:
    """The Procfile's command for process `name`, its variables filled in from `env`."""
    for line in PROCFILE.read_text().splitlines():
        entry, _, command = line.partition(":")
        if entry.strip() == name:
            filled = VARIABLE.sub(
                lambda m: env.get(m[1] or m[3]) or (m[2] or ""),
                command.strip(),
            )
            return shlex.split(filled)
    raise KeyError(f"no process {name!r} in {PROCFILE}")


def procfile_spawn(name: str, redis_url: str, env: dict[str, str]) -> tuple[ChildProcess, str]:
    """Start the Procfile's `name` process (not yet ready); its command line too."""
    full = {"DJANGO_SETTINGS_MODULE": SETTINGS_MODULE, **env}
    command = procfile_command(name, {**os.environ, **full})
    process, log_path = process_spawn(name=name, command=command, redis_url=redis_url, env=full)
    return ChildProcess(process=process, log_path=log_path), shlex.join(command)


def broker_purge(run_ids: set[str]) -> int:
    """Remove the steps of these runs still queued or unacknowledged in the broker."""
    client = eventlog.redis_client()
    queue = str(settings.CELERY_TASK_DEFAULT_QUEUE)

    def ours(raw: bytes | str) -> bool:
        text = raw.decode() if isinstance(raw, bytes) else raw
        return bool(set(UUID.findall(text)) & run_ids)

    removed = 0
    for raw in client.lrange(queue, 0, -1):
        if ours(raw):
            removed += client.lrem(queue, 0, raw)  # type: ignore[arg-type]
    for tag, raw in client.hgetall("unacked").items():
        if ours(raw):
            removed += client.hdel("unacked", tag)
            client.zrem("unacked_index", tag)
    return removed


@contextlib.contextmanager
def procfile_stack(
    *, tokens: int, rate: float, first_token_delay: float | None, env: dict[str, str]
) -> Iterator[tuple[Stack, dict[str, str]]]:
    """Redis, the fake upstream (with its chunk log), a bench user with an API key, and the
    Procfile's worker, beat and web (one Daphne) with `env` on top of this environment;
    yields the Stack and each process's command line. Undone in reverse order on the way
    out, also on error: processes stopped, steps left in the broker removed, the user, its
    conversations and run logs deleted."""
    with contextlib.ExitStack() as cleanup:
        url, redis_stop = redis_start()
        cleanup.callback(redis_stop)
        work = Path(tempfile.mkdtemp(prefix="parley-burst-"))
        cleanup.callback(shutil.rmtree, work, ignore_errors=True)
        metrics = work / "metrics"
        metrics.mkdir()
        chunk_log = work / "chunks.jsonl"
        fake, base_url = fake_start(
            tokens=tokens, rate=rate, chunk_log=chunk_log, first_token_delay=first_token_delay
        )
        cleanup.callback(fake.wait, timeout=10)
        cleanup.callback(fake.terminate)
        owner = User.objects.create_user(username=f"bench-{secrets.token_hex(6)}")
        cleanup.callback(owner_delete, owner)
        if os.environ.get("REDIS_URL") and url == os.environ["REDIS_URL"]:
            runs = Run.objects.filter(conversation__owner=owner)
            cleanup.callback(lambda: broker_purge({str(pk) for pk in runs.values_list("pk")}))
        port = free_port()
        env = {
            "OPENAI_API_KEY": "bench",
            "OPENAI_BASE_URL": base_url,
            "PARLEY_HOST": "127.0.0.1",
            "PARLEY_PORT": str(port),
            "PARLEY_BEAT_SCHEDULE": str(work / "celerybeat-schedule"),
            "PROMETHEUS_MULTIPROC_DIR": str(metrics),
            **env,
        }
        commands: dict[str, str] = {}
        child, commands["worker"] = procfile_spawn("worker", url, env)
        worker = Worker(process=child.process, log_path=child.log_path)
        cleanup.callback(process_stop, worker)
        beat, commands["beat"] = procfile_spawn("beat", url, env)
        cleanup.callback(process_stop, beat)
        child, commands["web"] = procfile_spawn("web", url, env)
        web = WebServer(process=child.process, log_path=child.log_path, port=port)
        cleanup.callback(process_stop, web)
        process_wait_ready(worker, "worker", lambda: "ready." in worker.log())
        process_wait_ready(beat, "beat", lambda: "beat: Starting" in beat.log())
        process_wait_ready(web, "daphne", web.accepts_connections)
        key = api_key_create(owner=owner, name="bench")[1]
        stack = Stack(owner, key, [web], worker, fake, chunk_log)
        try:
            yield stack, commands
        except BaseException:
            progress("failed; error lines in the logs:\n" + "\n".join(stack.log_errors()[-20:]))
            raise
