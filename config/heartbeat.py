"""The workers' heartbeat: how /readyz knows that some worker is alive to take the replies.

Every worker process writes `HEARTBEAT_KEY` every PARLEY_WORKER_HEARTBEAT_SECONDS with a
time to live of three periods. While any worker lives the key is there; once the last one
is gone (or none can reach Redis) it expires within three periods and /readyz says so.
Its value says which worker wrote last and when, for people looking.

The writer is a daemon thread started when the worker is ready (config/celery.py). It
never ends on an error: a Redis restart or outage is retried every period, logged once
when it begins and once when it is over, so a long outage does not flood the log.
"""

import json
import logging
import os
import socket
import threading
import time
from typing import Any

import redis
from django.conf import settings
from redis.backoff import NoBackoff
from redis.retry import Retry

log = logging.getLogger(__name__)

HEARTBEAT_KEY = "parley:worker:heartbeat"
TTL_PERIODS = 3


def quick_client(url: str, *, timeout: float) -> redis.Redis:
    """A client whose every command gives up after `timeout` seconds, without retries: a
    beat or a readiness check that cannot reach Redis says so at once."""
    return redis.Redis.from_url(
        url,
        socket_connect_timeout=timeout,
        socket_timeout=timeout,
        retry=Retry(NoBackoff(), 0),
    )


def heartbeat_read(client: redis.Redis) -> dict[str, Any] | None:
    """The last heartbeat any worker wrote, if one is still alive; None otherwise."""
    raw = client.get(HEARTBEAT_KEY)
    if raw is None:
        return None
    try:
        value = json.loads(raw)
    except ValueError:
        value = None
    # A value this version cannot read still proves a worker wrote it within its TTL.
    return value if isinstance(value, dict) else {}


class Heartbeat:
    """One process's heartbeat: `beat()` writes once, `run()` every period until `stop()`."""

    def __init__(self, *, url: str, period: float) -> None:
        self.url = url
        self.period = max(period, 0.1)
        self.ttl_ms = int(self.period * TTL_PERIODS * 1000)
        self.hostname = socket.gethostname()
        self.pid = os.getpid()
        self._client = quick_client(url, timeout=min(self.period, 5.0))
        self.failing = False
        self._stopped = threading.Event()

    def beat(self) -> bool:
        """Write the heartbeat; False (logged once per outage) when Redis did not take it."""
        value = {"hostname": self.hostname, "pid": self.pid, "at": time.time()}
        try:
            self._client.set(HEARTBEAT_KEY, json.dumps(value), px=self.ttl_ms)
        except Exception as error:
            if not self.failing:
                self.failing = True
                log.warning(
                    "worker heartbeat: could not write to Redis (%s); trying again every %gs",
                    error,
                    self.period,
                )
            return False
        if self.failing:
            self.failing = False
            log.info("worker heartbeat: written again, Redis is reachable")
        return True

    def run(self) -> None:
        while True:
            try:
                self.beat()
            except Exception:  # beat() catches its own; nothing may end this thread
                log.exception("worker heartbeat: unexpected error")
            if self._stopped.wait(self.period):
                return

    def stop(self) -> None:
        """End `run()` after its current beat. The key is left to expire: another worker
        may still be alive."""
        self._stopped.set()


_started: Heartbeat | None = None
_started_lock = threading.Lock()


def heartbeat_start() -> Heartbeat:
    """Start this process's heartbeat thread (once; later calls return the running one)."""
    global _started
    with _started_lock:
        if _started is None or _started.pid != os.getpid():
            heartbeat = Heartbeat(
                url=settings.REDIS_URL, period=settings.PARLEY_WORKER_HEARTBEAT_SECONDS
            )
            thread = threading.Thread(
                target=heartbeat.run, name="parley-worker-heartbeat", daemon=True
            )
            thread.start()
            _started = heartbeat
        return _started
