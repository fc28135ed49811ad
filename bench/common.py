"""What every benchmark needs: Django set up, percentiles, process CPU and memory, the fake
upstream in its own process, the clean-up of the bench user, calls timed side by side
with their SQL statements counted, and a table of measures.

Call `django_setup()` before importing anything that touches models.
"""

import math
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Hashable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import django

if TYPE_CHECKING:
    from collections.abc import Callable

    from django.db.models import Model
    from django.test import Client
    from django.test.utils import override_settings

    from accounts.models import User
    from tests.support.processes import ChildProcess

ROOT = Path(__file__).resolve().parents[1]


def django_setup(settings_module: str = "config.settings.test") -> None:
    os.environ["DJANGO_SETTINGS_MODULE"] = settings_module
    # Time what production runs: without DEBUG's cursor wrapper keeping every SQL string.
    os.environ.setdefault("DEBUG", "false")
    django.setup()


def progress(message: str) -> None:
    """A status line on stderr, so stdout holds only the report."""
    print(message, file=sys.stderr, flush=True)


def database_refused(bench: str, allow_sqlite: bool) -> bool:
    from django.db import connection

    if connection.vendor == "postgresql" or allow_sqlite:
        return False
    progress(f"bench.{bench} measures PostgreSQL, not {connection.vendor}: set DATABASE_URL")
    return True


def database_label() -> str:
    """The database measured, for a report's header: PostgreSQL with its server version."""
    from django.db import connection

    if connection.vendor != "postgresql":
        return str(connection.display_name)
    with connection.cursor() as cursor:
        cursor.execute("SHOW server_version")
        return f"PostgreSQL {cursor.fetchone()[0]}"


def host_label() -> str:
    """The CPUs and how busy they were over the last minute, for a report's header: on a
    shared machine the absolute times follow the load."""
    return f"{os.cpu_count()} CPUs (load average {os.getloadavg()[0]:.1f})"


def analyze(*models: "type[Model]") -> None:
    """Fresh planner statistics after a bulk load (PostgreSQL; nothing to do elsewhere)."""
    from django.db import connection

    if connection.vendor != "postgresql":
        return
    with connection.cursor() as cursor:
        for model in models:
            cursor.execute(f"ANALYZE {connection.ops.quote_name(model._meta.db_table)}")


def pct(samples: list[float], q: int) -> float:
    """The q-th percentile (inclusive method); NaN without samples."""
    if len(samples) < 2:
        return samples[0] if samples else math.nan
    return statistics.quantiles(samples, n=100, method="inclusive")[q - 1]


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process, all its threads (Linux /proc; NaN elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return math.nan
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def fake_start(
    *, tokens: int, rate: float, chunk_log: Path, first_token_delay: float | None = None
) -> tuple[subprocess.Popen[str], str]:
    """The fake OpenAI upstream in its own process, logging each chunk's send time to
    `chunk_log`; returns the process and its base URL."""
    command = [sys.executable, "-m", "tests.support.fake_openai_server", "--port", "0"]
    command += ["--tokens", str(tokens), "--tokens-per-second", str(rate)]
    command += ["--chunk-log", str(chunk_log)]
    if first_token_delay is not None:
        command += ["--first-token-delay", str(first_token_delay)]
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    line = process.stdout.readline() if process.stdout else ""
    if not line.startswith("listening "):
        process.kill()
        raise RuntimeError(f"the fake upstream did not start: {line!r}")
    return process, line.split()[1]


def owner_delete(owner: "User") -> None:
    """Delete a bench user (its API keys go with it), its conversations and its runs'
    event logs."""
    from conversations.engine import eventlog
    from conversations.models import Conversation, Run, UsageDay

    run_ids = list(Run.objects.filter(conversation__owner=owner).values_list("pk", flat=True))
    keys = [eventlog.stream_key(pk) for pk in run_ids]
    for start in range(0, len(keys), 500):
        eventlog.redis_client().delete(*keys[start : start + 500])
    Conversation.objects.filter(owner=owner).delete()
    # A deleted account's usage stays in the dashboard's daily totals; a benchmark's must not.
    UsageDay.objects.filter(owner=owner).delete()
    owner.delete()
    progress(f"cleaned up user {owner.username}, its conversations and {len(keys)} run logs")


def process_stop(process: "ChildProcess") -> None:
    """Stop a worker or web process this benchmark started, and delete its log (kept, and
    named, when PARLEY_BENCH_KEEP_LOGS is set)."""
    process.stop()
    if os.environ.get("PARLEY_BENCH_KEEP_LOGS"):
        progress(f"log kept: {process.log_path}")
    else:
        process.log_path.unlink(missing_ok=True)


def status_kib(pid: int, field: str = "VmRSS") -> int:
    """A memory figure of a process from /proc/<pid>/status, in KiB (VmRSS, VmHWM, ...)."""
    status = Path(f"/proc/{pid}/status").read_text()
    return int(status.split(f"{field}:", 1)[1].split()[0])


@dataclass
class Timing:
    """One call's timed samples, and the SQL statements it ran (counted once, untimed)."""

    samples_ms: list[float] = field(default_factory=list)
    queries: int = 0

    @property
    def median(self) -> float:
        return statistics.median(self.samples_ms)

    @property
    def p99(self) -> float:
        return pct(self.samples_ms, 99)


def queries_counted(call: "Callable[[], object]") -> int:
    """The SQL statements `call` runs. A wrapper, since each request the test client makes
    resets Django's own query log."""
    from django.db import connection

    executed: list[str] = []

    def count(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        executed.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(count):
        call()
    return len(executed)


Key = TypeVar("Key", bound=Hashable)


def alternating_timed(calls: "dict[Key, Callable[[], object]]", samples: int) -> dict[Key, Timing]:
    """Each call once untimed with its statements counted, then `samples` timed rounds of
    all of them, the order reversed every other round so a noisy machine's drift hits
    each alike."""
    timings = {name: Timing(queries=queries_counted(call)) for name, call in calls.items()}
    for round_ in range(samples):
        for name in list(calls) if round_ % 2 == 0 else list(reversed(calls)):
            started = time.perf_counter()
            calls[name]()
            timings[name].samples_ms.append((time.perf_counter() - started) * 1000)
    return timings


def getter(
    client: "Client", url: str, sizes: dict[str, int] | None = None
) -> "Callable[[], object]":
    """A GET of `url` through the whole stack, which must answer 200; the first answer's
    size in bytes is noted in `sizes` when given."""

    def get() -> object:
        response = client.get(url)
        assert response.status_code == 200, (url, response.status_code, response.content[:300])
        if sizes is not None:
            sizes.setdefault(url, len(response.content))
        return response

    return get


def requests_unthrottled(redis_url: str) -> "override_settings":
    """Settings to time many requests in a row: the request budgets far above what a
    benchmark sends, their counters in the Redis at `redis_url` as in production."""
    from django.conf import settings
    from django.test.utils import override_settings

    cache = {**settings.CACHES["default"], "LOCATION": redis_url}
    return override_settings(
        CACHES={**settings.CACHES, "default": cache},
        PARLEY_API_THROTTLE_RATE="100000000/minute",
        PARLEY_SHARE_VIEW_THROTTLE_RATE="100000000/minute",
    )


# measure, value, target, met: None without a target, a string to say why there is no verdict
Row = tuple[str, object, str, bool | str | None]


def table_print(rows: list[Row]) -> None:
    """A Markdown table of measures, each with its target and PASS / FAIL when it has one."""
    print("| measure | value | target | result |\n|---|---:|---|---|")
    for name, value, target, met in rows:
        verdict = met if isinstance(met, str) else "" if met is None else "PASS" if met else "FAIL"
        print(f"| {name} | {value} | {target} | {verdict} |")
