"""The numbers `GET /metrics` reports (Prometheus), defined once for every process that
moves them: web processes count runs started and open sockets, workers count replies,
event-log writes, provider errors and tool calls.

With PROMETHEUS_MULTIPROC_DIR set (`make run` sets it) each process writes its counts to
its own files in that directory and the /metrics view adds them all up, so whichever web
process answers the scrape reports the whole machine. Without it, each process reports
only its own numbers: fine for one process, misleading for several.

Counting must never cost a reply: every function below swallows its own failure (a full
disk, a directory removed under a running process) and logs it once per process.
"""

import functools
import logging
import os
import time
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import ParamSpec

from prometheus_client import Counter, Gauge, Histogram, disable_created_metrics

log = logging.getLogger(__name__)
P = ParamSpec("P")

if _directory := os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
    # Each process opens its files there on its first count; a directory cleaned away
    # between runs is simply made again rather than failing every count.
    os.makedirs(_directory, exist_ok=True)
# No `_created` series: a process's start time says nothing about conversations, and in
# multiprocess mode they are left out anyway, so both modes report the same names.
disable_created_metrics()

RUNS_STARTED = Counter(
    "parley_runs_started", "Runs started: a user's message accepted for a reply."
)
RUNS_ENDED = Counter("parley_runs_ended", "Runs ended, by how they ended.", ["status"])
# From the moment the user's message was accepted (queue wait included: that is what the
# user waits through) to the first words of the reply written to the run's event log.
TIME_TO_FIRST_TOKEN = Histogram(
    "parley_run_time_to_first_token_seconds",
    "Seconds from a run's start to the first text of its reply.",
    buckets=(0.1, 0.25, 0.5, 1, 2, 3, 5, 8, 13, 20, 30, 60, 120),
)
RUN_DURATION = Histogram(
    "parley_run_duration_seconds",
    "Seconds from a run's start to its end (every model call and tool of the reply).",
    ["status"],
    buckets=(0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1800),
)
EVENT_LOG_WRITES = Counter(
    "parley_event_log_writes",
    "Events appended to runs' event logs (coalesced deltas count once per write).",
)
# "livesum": the sockets of processes still running, added up; a stopped web process's
# sockets are gone with it.
WEBSOCKETS_OPEN = Gauge(
    "parley_websockets_open", "Conversation websockets open.", multiprocess_mode="livesum"
)
PROVIDER_ERRORS = Counter(
    "parley_provider_errors",
    "Model calls that failed and ended their run, by error code.",
    ["code"],
)
TOOL_CALLS = Counter(
    "parley_tool_calls",
    "Tool calls the model asked for, by tool and outcome (ok, error, timeout, refused, cancelled).",
    ["tool", "outcome"],
)
# A tool server's share of those, by server (its name, as admins registered it).
TOOL_SERVER_CALLS = Counter(
    "parley_tool_server_calls",
    "Calls of tool servers' tools, by server and outcome (ok, error, timeout, refused, cancelled).",
    ["server", "outcome"],
)
TOOL_SERVER_ERRORS = Counter(
    "parley_tool_server_errors",
    "Calls of tool servers' tools that ended in an error or a timeout, by server.",
    ["server"],
)
TOOL_SERVER_CALL_SECONDS = Histogram(
    "parley_tool_server_call_seconds",
    "Seconds a tool server's tool took to answer (or to time out), by server.",
    ["server"],
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600),
)

_failed_once = False


def _never_raises(count: Callable[P, None]) -> Callable[P, None]:
    @functools.wraps(count)
    def safely(*args: P.args, **kwargs: P.kwargs) -> None:
        global _failed_once
        try:
            count(*args, **kwargs)
        except Exception:
            if not _failed_once:
                _failed_once = True
                log.warning(
                    "metrics: could not count (%s); carrying on", count.__name__, exc_info=True
                )

    return safely


@_never_raises
def run_started() -> None:
    RUNS_STARTED.inc()


@_never_raises
def run_ended(status: str, *, started: datetime | None, ended: datetime | None) -> None:
    RUNS_ENDED.labels(status=status).inc()
    if started is not None and ended is not None:
        RUN_DURATION.labels(status=status).observe(max(0.0, (ended - started).total_seconds()))


@_never_raises
def first_token(*, since: float) -> None:
    """The run's first words were written; `since` is when it started (a Unix time)."""
    TIME_TO_FIRST_TOKEN.observe(max(0.0, time.time() - since))


@_never_raises
def event_log_written() -> None:
    EVENT_LOG_WRITES.inc()


@_never_raises
def websocket_opened() -> None:
    WEBSOCKETS_OPEN.inc()


@_never_raises
def websocket_closed() -> None:
    WEBSOCKETS_OPEN.dec()


@_never_raises
def provider_error(code: str) -> None:
    PROVIDER_ERRORS.labels(code=code).inc()


@_never_raises
def tool_called(*, tool: str, outcome: str) -> None:
    TOOL_CALLS.labels(tool=tool, outcome=outcome).inc()


@_never_raises
def tool_server_called(*, server: str, outcome: str, seconds: float | None) -> None:
    """A tool server's tool was called (`seconds`: None when it was never sent)."""
    TOOL_SERVER_CALLS.labels(server=server, outcome=outcome).inc()
    if outcome in ("error", "timeout"):
        TOOL_SERVER_ERRORS.labels(server=server).inc()
    if seconds is not None:
        TOOL_SERVER_CALL_SECONDS.labels(server=server).observe(max(0.0, seconds))


@_never_raises
def run_endings_known(statuses: Iterable[str]) -> None:
    """Show every way a run can end from the start, at zero (called when the app is
    ready): a rate over a series that appears only with its first failure misses it."""
    for status in statuses:
        RUNS_ENDED.labels(status=status)
        RUN_DURATION.labels(status=status)
