"""Celery tasks: thin wrappers over the engine. Their names are fixed (the engine enqueues
steps by name, and steps queued before a deploy must still route after it)."""

import logging
from contextvars import Token
from typing import Any

from celery import Task, shared_task
from celery.signals import task_postrun, task_prerun, worker_shutdown
from django.conf import settings

from config.log_context import log_ids_bind, log_ids_reset, task_request_id
from conversations import engine, services

logger = logging.getLogger(__name__)


@shared_task(name="conversations.tasks.run_step")
def run_step(run_id: str) -> None:
    engine.run_step(run_id)


# For the whole of a step, Celery's own line saying it succeeded included, the lines logged
# name its run and the request that started the run, sent in the message's headers
# (engine/dispatch.py); the next step this one enqueues carries that request id on.
_step_ids: dict[str, Token[Any]] = {}


@task_prerun.connect
def _step_ids_bind(
    task_id: str, task: Task, args: tuple[Any, ...], kwargs: dict[str, Any], **_: object
) -> None:
    if task.name == run_step.name:
        run_id = args[0] if args else kwargs.get("run_id")
        request_id = task_request_id(task.request)
        _step_ids[task_id] = log_ids_bind(request_id=request_id, run_id=run_id)


@task_postrun.connect
def _step_ids_reset(task_id: str, **_: object) -> None:
    token = _step_ids.pop(task_id, None)
    if token is not None:
        log_ids_reset(token)


@worker_shutdown.connect
def _replies_drain(**_: object) -> None:
    """A warm shutdown has let its tasks end; the replies they handed to the streaming loop
    may still be streaming: let them end, within PARLEY_WORKER_DRAIN_SECONDS, and queue
    the others again at once instead of leaving them to their leases' expiry."""
    handed_back = engine.replies_drain(timeout=settings.PARLEY_WORKER_DRAIN_SECONDS)
    if handed_back:
        logger.warning("shutdown: %d replies stopped and queued again", handed_back)


@shared_task(name="conversations.tasks.runs_watchdog")
def runs_watchdog() -> dict[str, int]:
    return engine.runs_watchdog()


@shared_task(name="conversations.tasks.conversations_purge")
def conversations_purge() -> dict[str, int]:
    """Retention (PARLEY_RETENTION_DAYS; a no-op while it is 0), and the conversations of
    imports that never finished."""
    result = services.conversations_purge()
    abandoned = services.imports_abandoned_delete()
    return {
        "conversations": result.conversations,
        "messages": result.messages,
        "abandoned_imports": abandoned,
    }


@shared_task(name="conversations.tasks.files_orphans_sweep")
def files_orphans_sweep() -> dict[str, int]:
    """Uploaded files no message uses, older than PARLEY_FILE_ORPHAN_SECONDS, with their bytes."""
    return {"files": services.files_orphans_sweep()}


@shared_task(name="conversations.tasks.files_released_sweep")
def files_released_sweep() -> dict[str, int]:
    """Files whose last message was deleted, with their bytes."""
    return {"files": services.files_released_sweep()}
