"""The Celery app: workers run the tool loop one step per task (conversations/tasks.py)."""

import gc
import os

from celery import Celery
from celery.signals import setup_logging, worker_ready
from django.conf import settings
from django.utils.log import configure_logging

from config.heartbeat import heartbeat_start

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.local")

app = Celery("parley")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@setup_logging.connect
def _logging_as_configured(**_: object) -> None:
    """The worker's and beat's own lines (a task received, a worker ready) are logged as
    the web processes' are, from LOGGING: plain text, or JSON lines with LOG_FORMAT=json,
    with the request and run ids. Celery otherwise installs its own format; LOG_LEVEL
    decides the level here too, not --loglevel."""
    configure_logging(settings.LOGGING_CONFIG, settings.LOGGING)


@worker_ready.connect
def _freeze_startup_heap(**_: object) -> None:
    """Leave the objects of a started worker (modules, settings, the SDK) out of garbage
    collection. A full collection otherwise walks a quarter million of them, and holds
    the GIL for 100-250 ms, while replies stream on the same process's loop."""
    import conversations.engine  # noqa: F401  (the providers and the SDK: loaded by the first step anyway)

    gc.collect()
    gc.freeze()


@worker_ready.connect
def _heartbeat_start(**_: object) -> None:
    """Tell /readyz, through Redis, that this worker is alive, for as long as it runs
    (config/heartbeat.py)."""
    heartbeat_start()
