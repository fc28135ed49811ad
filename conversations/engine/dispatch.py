"""Handing a run's next step to a worker.

The one seam between the engine and the task module: a step is enqueued by its task's
*name*, so the engine imports nothing from conversations/tasks.py (which imports the
engine). The name is the one the task is registered under, unchanged across releases so
steps queued before a deploy still route after it.
"""

from celery import current_app

from config.log_context import task_headers

STEP_TASK = "conversations.tasks.run_step"


def step_enqueue(run_id: str, *, countdown: float = 0) -> None:
    """Queue one step of the run; any worker may take it. Its headers carry the request id
    in hand (the request that started the run, or the step before this one, which had it),
    so that the worker's lines for the step name it too."""
    args = (run_id,)
    current_app.send_task(
        STEP_TASK,
        args=args,
        countdown=countdown,
        headers=task_headers(),
        # What Celery would compute (a safe repr, for logs and monitors) at the cost of
        # two settings lookups and a repr walk per step: plain repr of one id says the same.
        argsrepr=repr(args),
        kwargsrepr="{}",
    )
