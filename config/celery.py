"""The Celery app: workers run the tool loop one step per task (conversations/tasks.py)."""

import gc
import os

from celery import Celery
from celery.signals import worker_ready

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.local")

app = Celery("parley")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@worker_ready.connect
def _freeze_startup_heap(**_: object) -> None:
    """Leave the objects of a started worker (modules, settings, the SDK) out of garbage
    collection. A full collection otherwise walks a quarter million of them, and holds
    the GIL for 100-250 ms, while replies stream on the same process's loop."""
    import conversations.engine  # noqa: F401  (the providers and the SDK: loaded by the first step anyway)

    gc.collect()
    gc.freeze()
