# Load the Celery app with Django so `shared_task` and `delay_on_commit` bind to it.
from config.celery import app as celery_app

__all__ = ["celery_app"]
