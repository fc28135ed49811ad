"""Start real Daphne processes (HTTP + websockets) for end-to-end tests."""

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from tests.e2e.worker import ROOT, database_url_for_tests


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class WebServer:
    process: subprocess.Popen[bytes]
    port: int
    log_path: Path

    @property
    def http_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=10)


def web_start(*, redis_url: str, env: dict[str, str] | None = None) -> WebServer:
    port = free_port()
    handle, name = tempfile.mkstemp(prefix="parley-daphne-", suffix=".log")
    log_file = os.fdopen(handle, "wb")
    full_env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "config.settings.test",
        "DATABASE_URL": database_url_for_tests(),
        "REDIS_URL": redis_url,
        "ALLOWED_HOSTS": "127.0.0.1,localhost",
        "PYTHONUNBUFFERED": "1",
        **(env or {}),
    }
    command = [
        sys.executable, "-m", "daphne", "--bind", "127.0.0.1", "--port", str(port),
        "config.asgi:application",
    ]  # fmt: skip
    process = subprocess.Popen(
        command, cwd=ROOT, env=full_env, stdout=log_file, stderr=subprocess.STDOUT,
        start_new_session=True,
    )  # fmt: skip
    log_file.close()
    server = WebServer(process=process, port=port, log_path=Path(name))
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"daphne exited early:\n{server.log()}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return server
        except OSError:
            time.sleep(0.1)
    server.stop()
    raise RuntimeError(f"daphne did not start:\n{server.log()}")
