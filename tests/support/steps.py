"""Driving a run's steps in the test process, as a worker would take them."""

import threading

import pytest
from django.db import connections

from conversations.engine import dispatch, inflight, runner
from conversations.models import Run
from tests.support.waiting import wait_until

# Longer than any test's reply takes to stream and be stored.
STEP_WAIT_SECONDS = 60


def step_run(run_id: str) -> None:
    """One step, as a worker takes it, waiting for a model call's reply to be stored too
    (the worker's thread does not wait: its reply streams on the process's loop)."""
    streaming = runner.run_step(run_id)
    if streaming is not None:
        streaming.result(timeout=STEP_WAIT_SECONDS)


def replies_stored() -> None:
    """Wait until the replies this process was streaming have ended and been stored (a
    step run as the worker's task runs it returns while its reply still streams)."""
    wait_until(
        lambda: inflight.in_flight.count() == 0,
        timeout=STEP_WAIT_SECONDS,
        what="the replies in flight to be stored",
    )


def run_to_end(run: Run | str, enqueued: list[str], *, most: int = 10) -> Run:
    """Every step of the run, each next one taken from `enqueued` (the `enqueued` fixture
    collects what the runner asks for): the run as it ended."""
    run_id = str(run.pk if isinstance(run, Run) else run)
    enqueued.clear()
    step_run(run_id)
    for _ in range(most):
        if not enqueued:
            break
        enqueued.pop(0)
        step_run(run_id)
    ended = Run.objects.get(pk=run_id)
    assert not ended.is_active
    if isinstance(run, Run):
        run.refresh_from_db()
    return ended


def steps_in_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each step the runner enqueues runs in a thread of this process, as a Celery worker
    takes it, instead of going to a broker."""

    def work(run_id: str, countdown: float = 0) -> None:
        def step() -> None:
            try:
                step_run(run_id)
            finally:
                connections.close_all()

        threading.Thread(target=step, daemon=True).start()

    monkeypatch.setattr(dispatch, "step_enqueue", work)
