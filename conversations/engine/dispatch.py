"""Handing a run's next step to a worker.

The one seam between the engine and the task module: a step is enqueued by its task's
*name*, so the engine imports nothing from conversations/tasks.py (which imports the
engine). The name is the one the task is registered under, unchanged across releases so
steps queued before a deploy still route after it.
"""

from celery import current_app

STEP_TASK = "conversations.tasks.run_step"


def step_enqueue(run_id: str, *, countdown: float = 0) -> None:
    """Queue one step of the run; any worker may take it."""
    current_app.send_task(STEP_TASK, args=(run_id,), countdown=countdown)
