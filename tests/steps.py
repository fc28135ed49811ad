"""Driving a run's steps in the test process, as a worker would take them."""

from conversations.engine import runner
from conversations.models import Run


def run_to_end(run: Run | str, enqueued: list[str], *, most: int = 10) -> Run:
    """Every step of the run, each next one taken from `enqueued` (the `enqueued` fixture
    collects what the runner asks for): the run as it ended."""
    run_id = str(run.pk if isinstance(run, Run) else run)
    enqueued.clear()
    runner.run_step(run_id)
    for _ in range(most):
        if not enqueued:
            break
        enqueued.pop(0)
        runner.run_step(run_id)
    ended = Run.objects.get(pk=run_id)
    assert not ended.is_active
    if isinstance(run, Run):
        run.refresh_from_db()
    return ended
