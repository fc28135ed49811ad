"""Who may read /metrics (loopback without a token, a Bearer token from anywhere with one),
and the counts of several processes added up when PROMETHEUS_MULTIPROC_DIR is set."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import redis
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

from conversations import metrics, services
from conversations.models import Run
from tests.support.processes import ROOT

pytestmark = pytest.mark.django_db

TOKEN = "s3cret-metrics-token"


def values(response) -> dict[str, float]:
    """Unlabelled samples by name, and labelled ones as name{label=value,...}."""
    found = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for sample in family.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
            found[f"{sample.name}{{{labels}}}" if labels else sample.name] = sample.value
    return found


@pytest.mark.parametrize("address", ["127.0.0.1", "::1", "::ffff:127.0.0.1"])
def test_without_a_token_loopback_clients_may_read(address):
    response = Client(REMOTE_ADDR=address).get("/metrics")

    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain")
    assert "parley_runs_started_total" in values(response)


@pytest.mark.parametrize("address", ["10.0.0.7", "192.168.1.20", "2001:db8::1", ""])
def test_without_a_token_other_clients_are_refused(address):
    response = Client(REMOTE_ADDR=address).get("/metrics")

    assert response.status_code == 403
    assert b"parley_" not in response.content


def test_without_a_token_a_request_relayed_by_a_local_proxy_is_refused():
    # The proxy is on this machine, the client it relays for is not.
    relayed = Client(REMOTE_ADDR="127.0.0.1", HTTP_X_FORWARDED_FOR="203.0.113.9")

    assert relayed.get("/metrics").status_code == 403


def test_with_a_token_it_is_needed_from_every_address(settings):
    settings.PARLEY_METRICS_TOKEN = TOKEN
    local, remote = Client(REMOTE_ADDR="127.0.0.1"), Client(REMOTE_ADDR="10.0.0.7")

    missing = local.get("/metrics")
    assert missing.status_code == 401
    assert missing["WWW-Authenticate"].startswith("Bearer")
    assert local.get("/metrics", HTTP_AUTHORIZATION=f"Basic {TOKEN}").status_code == 401
    wrong = remote.get("/metrics", HTTP_AUTHORIZATION="Bearer not-the-token")
    assert wrong.status_code == 403
    assert b"parley_" not in wrong.content
    assert remote.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}x").status_code == 403

    allowed = remote.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    assert allowed.status_code == 200
    assert "parley_runs_started_total" in values(allowed)


@pytest.mark.django_db(transaction=True)
def test_active_runs_are_read_at_scrape_time(owner):
    # Committed, so the scrape's helper thread (its own connection) sees them.
    for title in ("a", "b"):
        conversation = services.conversation_create(owner=owner, title=title)
        Run.objects.create(conversation=conversation)  # queued, as a new run is

    found = values(Client().get("/metrics"))

    assert found["parley_runs_active{status=queued}"] == 2
    assert found["parley_runs_active{status=in_progress}"] == 0


def test_the_broker_queue_length_is_read_at_scrape_time(redis_url, settings):
    client = redis.Redis.from_url(redis_url)
    queue = settings.CELERY_TASK_DEFAULT_QUEUE
    client.delete(queue)
    client.rpush(queue, "step-1", "step-2", "step-3")
    try:
        found = values(Client().get("/metrics"))
    finally:
        client.delete(queue)
        client.close()

    assert found["parley_step_queue_length"] == 3


def count_in_a_process(directory: Path, code: str, *, wait: bool = False) -> subprocess.Popen:
    """A process that imports the metrics with PROMETHEUS_MULTIPROC_DIR set and counts;
    with `wait`, it stays alive until its stdin closes."""
    script = "from conversations import metrics\n" + code
    if wait:
        script += "\nprint('counted', flush=True)\nimport sys\nsys.stdin.read()\n"
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(directory)}
    return subprocess.Popen(
        [sys.executable, "-c", script],
        cwd=ROOT,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


def test_several_processes_counts_are_added_up(tmp_path, monkeypatch):
    directory = tmp_path / "metrics"
    for code in ("metrics.run_started()", "metrics.run_started(); metrics.run_started()"):
        assert count_in_a_process(directory, code).wait(timeout=30) == 0
    # A web process still running with one socket open.
    alive = count_in_a_process(directory, "metrics.websocket_opened()", wait=True)
    try:
        assert alive.stdout is not None
        assert alive.stdout.readline().strip() == "counted"
        monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(directory))

        found = values(Client().get("/metrics"))

        # Only the files: this test process counts in memory, as it has no directory.
        assert found["parley_runs_started_total"] == 3
        assert found["parley_websockets_open"] == 1
    finally:
        assert alive.stdin is not None
        alive.stdin.close()
        alive.wait(timeout=30)

    # Its sockets went with it (no live process reports any: here, none at all); what it
    # counted stays.
    found = values(Client().get("/metrics"))
    assert found.get("parley_websockets_open", 0) == 0
    assert found["parley_runs_started_total"] == 3


def test_a_killed_process_sockets_leave_the_count(tmp_path, monkeypatch):
    directory = tmp_path / "metrics"
    web = count_in_a_process(directory, "metrics.websocket_opened()", wait=True)
    assert web.stdout is not None
    assert web.stdout.readline().strip() == "counted"
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(directory))
    assert values(Client().get("/metrics"))["parley_websockets_open"] == 1

    web.kill()  # no chance to take its socket off the count itself
    web.wait(timeout=30)

    assert values(Client().get("/metrics")).get("parley_websockets_open", 0) == 0


def test_counting_never_raises_and_says_so_once(monkeypatch, caplog):
    def broken(*args, **kwargs):
        raise OSError("No space left on device")

    monkeypatch.setattr(metrics, "_failed_once", False)
    monkeypatch.setattr(metrics.RUNS_STARTED, "inc", broken)
    monkeypatch.setattr(metrics.TOOL_CALLS, "labels", broken)

    metrics.run_started()
    metrics.run_started()
    metrics.tool_called(tool="calculator", outcome="ok")

    warnings = [r for r in caplog.records if r.name == metrics.__name__]
    assert len(warnings) == 1
    assert "could not count" in warnings[0].getMessage()
