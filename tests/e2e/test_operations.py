"""The operators' endpoints with real processes: Daphne answers /readyz from a real worker's
heartbeat, and its /metrics adds up what the web process and the worker counted (each in
its own files in PROMETHEUS_MULTIPROC_DIR), as `make run` sets them up."""

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from prometheus_client.parser import text_string_to_metric_families
from websockets.sync.client import connect

from accounts import services as account_services
from config.heartbeat import HEARTBEAT_KEY
from tests.support.fake_openai import FakeOpenAI, Script
from tests.support.waiting import wait_until
from tests.support.web_server import WebServer, web_start

pytestmark = pytest.mark.django_db(transaction=True)

HEARTBEAT_SECONDS = 1


def get(web: WebServer, path: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(f"{web.http_url}{path}", timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def readiness(web: WebServer) -> tuple[int, dict[str, Any]]:
    status, body = get(web, "/readyz")
    return status, json.loads(body)


def metric_values(web: WebServer) -> dict[str, float]:
    status, body = get(web, "/metrics")
    assert status == 200, body
    found = {}
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
            found[f"{sample.name}{{{labels}}}" if labels else sample.name] = sample.value
    return found


@pytest.fixture
def ops_env(tmp_path, redis_url: str) -> Iterator[dict[str, str]]:
    client = redis.Redis.from_url(redis_url)
    client.delete(HEARTBEAT_KEY)  # a worker of an earlier test is no worker of this one
    yield {
        "PROMETHEUS_MULTIPROC_DIR": str(tmp_path / "metrics"),
        "PARLEY_WORKER_HEARTBEAT_SECONDS": str(HEARTBEAT_SECONDS),
    }
    client.delete(HEARTBEAT_KEY)
    client.close()


def test_readyz_follows_the_worker_and_metrics_add_up_every_process(
    owner, redis_url, workers, fake_openai: FakeOpenAI, ops_env
):
    web = web_start(redis_url=redis_url, env=ops_env)
    try:
        status, body = readiness(web)
        assert status == 503
        assert body["checks"]["worker"]["error"] == "no worker heartbeat"
        assert body["checks"]["database"]["ok"]
        assert body["checks"]["redis"]["ok"]

        worker = workers(**ops_env)
        wait_until(lambda: readiness(web)[0] == 200, timeout=10, what="a worker heartbeat")

        key = account_services.api_key_create(owner=owner, name="ops")[1]
        fake_openai.push(Script(text="Hello from the worker."))
        request = urllib.request.Request(
            f"{web.http_url}/api/v1/chat/",
            data=json.dumps({"message": "Hi"}).encode(),
            headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            answer = json.loads(response.read())
        assert answer["status"] == "completed"

        found = metric_values(web)
        # Started in the web process, ended in the worker: both reach this one answer.
        assert found["parley_runs_started_total"] == 1
        assert found["parley_runs_ended_total{status=completed}"] == 1
        assert found["parley_run_time_to_first_token_seconds_count"] == 1
        assert found["parley_event_log_writes_total"] >= 5
        assert found["parley_runs_active{status=queued}"] == 0

        socket_url = f"{web.ws_url}/ws/conversations/{answer['conversation_id']}/"
        with connect(socket_url, additional_headers={"Authorization": f"Bearer {key}"}):
            wait_until(lambda: metric_values(web)["parley_websockets_open"] == 1, timeout=5)
        wait_until(lambda: metric_values(web)["parley_websockets_open"] == 0, timeout=5)

        worker.stop()
        # No worker writes again: the heartbeat expires within three periods.
        wait_until(lambda: readiness(web)[0] == 503, timeout=3 * HEARTBEAT_SECONDS + 5)
    finally:
        web.stop()
