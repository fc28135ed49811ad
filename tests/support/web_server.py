"""Start real Daphne processes (HTTP + websockets) for end-to-end tests."""

import socket
import sys
from dataclasses import dataclass

from tests.support.processes import ChildProcess, process_spawn, process_wait_ready


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class WebServer(ChildProcess):
    port: int = 0

    @property
    def http_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}"

    def accepts_connections(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                return True
        except OSError:
            return False


def web_start(*, redis_url: str, env: dict[str, str] | None = None) -> WebServer:
    port = free_port()
    command = [
        sys.executable, "-m", "daphne", "--bind", "127.0.0.1", "--port", str(port),
        "config.asgi:application",
    ]  # fmt: skip
    env = {"ALLOWED_HOSTS": "127.0.0.1,localhost", **(env or {})}
    process, log_path = process_spawn(name="daphne", command=command, redis_url=redis_url, env=env)
    server = WebServer(process=process, log_path=log_path, port=port)
    process_wait_ready(server, "daphne", server.accepts_connections)
    return server
