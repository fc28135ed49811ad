"""Celery tasks: thin wrappers over the runner."""

from celery import shared_task

from conversations import runner, services, watchdog


@shared_task(name="conversations.tasks.run_step")
def run_step(run_id: str) -> None:
    runner.run_step(run_id)


@shared_task(name="conversations.tasks.runs_watchdog")
def runs_watchdog() -> dict[str, int]:
    return watchdog.runs_watchdog()


@shared_task(name="conversations.tasks.conversations_purge")
def conversations_purge() -> dict[str, int]:
    """Retention (PARLEY_RETENTION_DAYS); a no-op while it is 0."""
    result = services.conversations_purge()
    return {"conversations": result.conversations, "messages": result.messages}
