"""The operators' endpoints, at the site's root and outside the API: `GET /healthz`,
`GET /readyz` and `GET /metrics` (README, "Operating Parley").

Plain Django views: no log-in, no session, no throttle; JSON or Prometheus text, never
cached.

- /healthz says the process answers. It touches nothing else, so an outage of the
  database or Redis never gets healthy processes restarted.
- /readyz checks the database, Redis and a live worker heartbeat (config/heartbeat.py),
  each named in the answer, and answers 503 when one is missing. Every check runs on a
  helper thread and is given up after CHECK_TIMEOUT_SECONDS, so a hung dependency makes
  the answer "unavailable", never a hung probe; a check still hung from an earlier probe
  is waited on again rather than started twice, so a long outage never piles up threads.
- /metrics is Prometheus text: the counts of every process on this machine added up when
  PROMETHEUS_MULTIPROC_DIR is set (conversations/metrics.py), and numbers read at scrape
  time (runs waiting and working, steps in the broker's queue). With PARLEY_METRICS_TOKEN
  it needs `Authorization: Bearer <token>`; without, it answers this machine only.
"""

import glob
import hmac
import ipaddress
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import connections
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_safe
from prometheus_client import REGISTRY
from prometheus_client.exposition import choose_encoder
from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.multiprocess import MultiProcessCollector, mark_process_dead

from accounts.models import User
from config.heartbeat import heartbeat_read, quick_client
from conversations import selectors

log = logging.getLogger(__name__)

# Each check's limit, and so about the longest /readyz takes (the checks run side by side).
CHECK_TIMEOUT_SECONDS = 2.0
# Headers a proxy adds when it relays a request: the client is then elsewhere, whatever
# address the connection came from.
FORWARDING_HEADERS = ("HTTP_X_FORWARDED_FOR", "HTTP_FORWARDED", "HTTP_X_REAL_IP")


@require_safe
@never_cache
def healthz(request: HttpRequest) -> HttpResponse:
    return JsonResponse({"status": "ok"})


@require_safe
@never_cache
def readyz(request: HttpRequest) -> HttpResponse:
    deadline = time.monotonic() + CHECK_TIMEOUT_SECONDS
    database = _started("database", _database_ping)
    redis = _started("redis", _redis_heartbeat)
    database_result, redis_result = _wait(database, deadline), _wait(redis, deadline)
    worker = _worker(redis_result)
    checks: dict[str, dict[str, Any]] = {
        "database": database_result.answer(),
        "redis": redis_result.answer(),
        "worker": worker,
    }
    _note("readiness: database", database_result.ok, database_result.reason())
    _note("readiness: redis", redis_result.ok, redis_result.reason())
    _note("readiness: worker", worker["ok"], worker.get("error", ""))
    ready = all(check["ok"] for check in checks.values())
    response = JsonResponse(
        {"status": "ok" if ready else "unavailable", "checks": checks},
        status=200 if ready else 503,
    )
    # Logged above once per outage; Django would log every probe's 503 as an error.
    response._has_been_logged = True  # type: ignore[attr-defined]
    return response


@require_safe
@never_cache
def metrics(request: HttpRequest) -> HttpResponse:
    refusal = _metrics_refusal(request)
    if refusal is not None:
        return refusal
    encoder, content_type = choose_encoder(request.headers.get("Accept", ""))
    return HttpResponse(encoder(_Scrape()), content_type=content_type)


# --- checks on helper threads -----------------------------------------------------------


@dataclass
class _Result:
    ok: bool
    ms: float
    value: Any = None
    error: str = ""  # the kind of failure, for the public answer
    detail: str = ""  # what it said, for the log

    def answer(self) -> dict[str, Any]:
        answer: dict[str, Any] = {"ok": self.ok, "ms": round(self.ms, 1)}
        if self.error:
            answer["error"] = self.error
        return answer

    def reason(self) -> str:
        return f"{self.error}: {self.detail}" if self.detail else self.error


_running: dict[str, Future[_Result]] = {}
_running_lock = threading.Lock()


def _started(name: str, check: Callable[[], Any]) -> Future[_Result]:
    """`check` running on a helper thread; the same run while an earlier one is unfinished.
    Daemon threads, not a pool's: a check hung on a dead server must not hold up the
    process when it is asked to stop."""

    def timed(future: Future[_Result]) -> None:
        started = time.monotonic()
        try:
            value = check()
        except BaseException as error:  # always an answer: a probe must never wait forever
            ms = (time.monotonic() - started) * 1000
            future.set_result(_Result(False, ms, error=type(error).__name__, detail=str(error)))
        else:
            future.set_result(_Result(True, (time.monotonic() - started) * 1000, value=value))

    with _running_lock:
        future = _running.get(name)
        if future is None or future.done():
            future = _running[name] = Future()
            thread = threading.Thread(
                target=timed, args=(future,), name=f"parley-ops-{name}", daemon=True
            )
            thread.start()
    return future


def _wait(future: Future[_Result], deadline: float) -> _Result:
    try:
        return future.result(timeout=max(0.0, deadline - time.monotonic()))
    except FutureTimeout:
        return _Result(False, CHECK_TIMEOUT_SECONDS * 1000, error="timed out")


def _database_ping() -> None:
    try:
        connections["default"].ensure_connection()
        User.objects.exists()  # a query answered, on a table of the schema
    finally:
        connections.close_all()  # this helper thread's own; nothing else would close it


def _redis_heartbeat() -> dict[str, Any] | None:
    """Redis answers (or this raises); then the workers' last heartbeat, if any is alive."""
    client = quick_client(settings.REDIS_URL, timeout=CHECK_TIMEOUT_SECONDS)
    try:
        client.ping()
        return heartbeat_read(client)
    finally:
        client.close()


def _worker(redis: _Result) -> dict[str, Any]:
    if not redis.ok:
        return {"ok": False, "age_seconds": None, "error": "Redis unavailable"}
    beat = redis.value
    if beat is None:
        return {"ok": False, "age_seconds": None, "error": "no worker heartbeat"}
    at = beat.get("at")
    age = round(max(0.0, time.time() - at), 1) if isinstance(at, int | float) else None
    return {"ok": True, "age_seconds": age}


_failing: set[str] = set()


def _note(what: str, ok: bool, reason: str) -> None:
    """Log a check that starts or stops failing, once each way: probes come every few
    seconds, and an outage should not flood the log."""
    if not ok and what not in _failing:
        _failing.add(what)
        log.warning("%s unavailable (%s)", what, reason)
    elif ok and what in _failing:
        _failing.discard(what)
        log.info("%s available again", what)


# --- /metrics ---------------------------------------------------------------------------


def _metrics_refusal(request: HttpRequest) -> HttpResponse | None:
    token = settings.PARLEY_METRICS_TOKEN
    if not token:
        if _from_this_machine(request):
            return None
        return _plain(
            403,
            "Metrics answer clients on this machine only; "
            "set PARLEY_METRICS_TOKEN to scrape from elsewhere.",
        )
    scheme, _, given = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not given.strip():
        response = _plain(401, "Send Authorization: Bearer <PARLEY_METRICS_TOKEN>.")
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return response
    if not hmac.compare_digest(given.strip().encode(), token.encode()):
        return _plain(403, "Wrong metrics token.")
    return None


def _from_this_machine(request: HttpRequest) -> bool:
    if any(request.META.get(header) for header in FORWARDING_HEADERS):
        return False  # relayed by a proxy, perhaps one on this machine: not a local client
    try:
        address = ipaddress.ip_address(str(request.META.get("REMOTE_ADDR", "")).strip("[]"))
    except ValueError:
        return False
    mapped = address.ipv4_mapped if isinstance(address, ipaddress.IPv6Address) else None
    return address.is_loopback or (mapped is not None and mapped.is_loopback)


def _plain(status: int, text: str) -> HttpResponse:
    return HttpResponse(text + "\n", status=status, content_type="text/plain; charset=utf-8")


class _Scrape:
    """What one scrape reports: the counts (of every process, or of this one), then the
    numbers read now."""

    def collect(self) -> Iterator[Metric]:
        directory = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
        if directory:
            os.makedirs(directory, exist_ok=True)
            _forget_stopped_processes(directory)
            yield from MultiProcessCollector(None, path=directory).collect()
        else:
            yield from REGISTRY.collect()
        yield from _read_now()


def _forget_stopped_processes(directory: str) -> None:
    """Drop the live gauges (open sockets) of processes that are gone: a web process that
    was killed never took its sockets off the count. Counters stay: what a stopped process
    counted still happened."""
    for path in glob.glob(os.path.join(directory, "gauge_live*_*.db")):
        try:
            pid = int(os.path.basename(path).rsplit("_", 1)[1].removesuffix(".db"))
            os.kill(pid, 0)
        except ValueError:
            continue
        except ProcessLookupError:
            mark_process_dead(pid, directory)
        except PermissionError:
            continue  # alive, another user's


def _read_now() -> Iterator[Metric]:
    """Numbers read at scrape time, each within the checks' time limit; one that cannot be
    read is left out of this scrape (and its failure logged once)."""
    deadline = time.monotonic() + CHECK_TIMEOUT_SECONDS
    runs = _started("runs", _runs_active)
    queue = _started("queue", _queue_length)
    runs_result, queue_result = _wait(runs, deadline), _wait(queue, deadline)
    _note("metrics: active runs", runs_result.ok, runs_result.reason())
    _note("metrics: broker queue", queue_result.ok, queue_result.reason())
    if runs_result.ok:
        gauge = GaugeMetricFamily(
            "parley_runs_active",
            "Runs waiting for a worker (queued) or being worked on (in_progress), now.",
            labels=["status"],
        )
        for status, count in runs_result.value.items():
            gauge.add_metric([status], count)
        yield gauge
    if queue_result.ok:
        yield GaugeMetricFamily(
            "parley_step_queue_length",
            "Steps of runs waiting in the broker's queue for a worker, now.",
            value=queue_result.value,
        )


def _runs_active() -> dict[str, int]:
    try:
        return selectors.runs_active_counts()
    finally:
        connections.close_all()


def _queue_length() -> int:
    client = quick_client(settings.CELERY_BROKER_URL, timeout=CHECK_TIMEOUT_SECONDS)
    try:
        return int(client.llen(settings.CELERY_TASK_DEFAULT_QUEUE))
    finally:
        client.close()
