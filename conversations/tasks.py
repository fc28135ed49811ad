"""Celery tasks: thin wrappers over the engine. Their names are fixed (the engine enqueues
steps by name, and steps queued before a deploy must still route after it)."""

from celery import shared_task

from conversations import engine, services


@shared_task(name="conversations.tasks.run_step")
def run_step(run_id: str) -> None:
    engine.run_step(run_id)


@shared_task(name="conversations.tasks.runs_watchdog")
def runs_watchdog() -> dict[str, int]:
    return engine.runs_watchdog()


@shared_task(name="conversations.tasks.conversations_purge")
def conversations_purge() -> dict[str, int]:
    """Retention (PARLEY_RETENTION_DAYS); a no-op while it is 0."""
    result = services.conversations_purge()
    return {"conversations": result.conversations, "messages": result.messages}
