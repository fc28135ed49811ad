"""Real MCP tool servers for the tests, built with the `mcp` package's own server and run
as processes of their own (streamable HTTP on uvicorn):

    .venv/bin/python -m tests.support.mcp_servers <kind> --port <port>

- `tokens`: wants `Authorization: Bearer <token>` (none, or a token starting with
  `expired`: 401; starting with `bad`: 403); `whoami` (read-only) answers with the token
  it saw, after `delay` seconds; `hello` says hello.
- `hangs`: `wait` never answers.
- `dies`: `crash` ends the process in the middle of the call.
- `varied`: no credential; `huge` (a long text), `structured` (structured content only),
  `fails` (an error result), `picture` (an image), `record` (not idempotent: notes what
  it was sent) and `lookup` (idempotent) with `recorded` (read-only) listing the notes;
  `two words`, a name no model takes.

`mcp_server_start` starts one and waits until it answers; `server_register` registers
one as a tool server through the services.
"""

import argparse
import base64
import contextlib
import os
import socket
import subprocess
import sys
import tempfile
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
KINDS = ("tokens", "hangs", "dies", "varied")
# A 1x1 PNG.
PIXEL = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]


# --- the servers (run in the child process) ---------------------------------------------


def _bearer(headers: Any) -> str:
    value = (headers or {}).get("authorization", "")
    return value.removeprefix("Bearer ") if value.startswith("Bearer ") else ""


def _tokens_server() -> Any:
    import anyio
    from mcp.server.mcpserver import Context, MCPServer
    from mcp_types import ToolAnnotations

    server = MCPServer("tokens")

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    async def whoami(ctx: Context, delay: float = 0) -> str:
        """Says which token the call came with."""
        await anyio.sleep(delay)
        return f"token={_bearer(ctx.headers)}"

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    def hello() -> str:
        """Says hello (to any caller its guard let in)."""
        return "hello"

    return server


def _hangs_server() -> Any:
    import anyio
    from mcp.server.mcpserver import MCPServer
    from mcp_types import ToolAnnotations

    server = MCPServer("hangs")

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    async def wait() -> str:
        """Never answers."""
        await anyio.sleep(3600)
        return "too late"

    return server


def _dies_server() -> Any:
    from mcp.server.mcpserver import MCPServer

    server = MCPServer("dies")

    @server.tool()
    def crash() -> str:
        """Ends the server's process mid-call."""
        os._exit(3)

    return server


def _varied_server() -> Any:
    import anyio
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError
    from mcp_types import CallToolResult, ImageContent, TextContent, ToolAnnotations

    server = MCPServer("varied")
    notes: list[str] = []

    @server.tool()
    def huge(size: int = 100_000) -> str:
        """A long text."""
        return "x" * size

    @server.tool()
    def structured(n: int) -> CallToolResult:
        """Structured content only."""
        return CallToolResult(content=[], structured_content={"n": n, "square": n * n})

    @server.tool()
    def fails() -> str:
        """Always fails."""
        raise ToolError("the warehouse is closed")

    @server.tool()
    def picture() -> CallToolResult:
        """An image and a caption."""
        data = base64.b64encode(PIXEL).decode()
        return CallToolResult(
            content=[TextContent(text="a pixel"), ImageContent(data=data, mime_type="image/png")]
        )

    @server.tool(annotations=ToolAnnotations(read_only_hint=False, idempotent_hint=False))
    async def record(note: str, delay: float = 0) -> str:
        """Notes something down (each call adds a line), then takes `delay` seconds."""
        notes.append(note)
        await anyio.sleep(delay)
        return f"noted {note}"

    @server.tool(annotations=ToolAnnotations(read_only_hint=False, idempotent_hint=True))
    async def lookup(note: str, delay: float = 0) -> str:
        """Notes something down once (the same call twice changes nothing more), then takes
        `delay` seconds."""
        if note not in notes:
            notes.append(note)
        await anyio.sleep(delay)
        return f"looked up {note}"

    @server.tool(name="two words")
    def two_words() -> str:
        """A name no model API takes for a function."""
        return "unreachable by name"

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    def recorded() -> str:
        """What `record` and `lookup` noted, one per line."""
        return "\n".join(notes)

    return server


def _guarded(app: App) -> App:
    """The app behind a bearer check: none or an `expired...` token is 401, a `bad...`
    token 403."""

    async def guard(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
            token = _bearer(headers)
            if not token or token.startswith(("bad", "expired")):
                status = 403 if token.startswith("bad") else 401
                await send({"type": "http.response.start", "status": status, "headers": []})
                await send({"type": "http.response.body", "body": b"refused"})
                return
        await app(scope, receive, send)

    return guard


def serve(kind: str, port: int) -> None:
    import uvicorn

    build = {
        "tokens": _tokens_server,
        "hangs": _hangs_server,
        "dies": _dies_server,
        "varied": _varied_server,
    }[kind]
    app = build().streamable_http_app()
    asgi = _guarded(app) if kind == "tokens" else app
    uvicorn.run(asgi, host="127.0.0.1", port=port, log_level="warning", lifespan="on")


# --- starting one (in the test process) -------------------------------------------------


@dataclass
class McpServerProcess:
    kind: str
    url: str
    process: subprocess.Popen[bytes]
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        with contextlib.suppress(OSError):
            self.log_path.unlink()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _answers(port: int) -> bool:
    with socket.socket() as probe:
        probe.settimeout(0.2)
        return probe.connect_ex(("127.0.0.1", port)) == 0


def mcp_server_start(kind: str) -> McpServerProcess:
    """Start a server of `kind` and wait (up to 30 s) until it accepts connections."""
    import time

    port = _free_port()
    handle, log_name = tempfile.mkstemp(prefix=f"parley-mcp-{kind}-", suffix=".log")
    with os.fdopen(handle, "wb") as log_file:
        process = subprocess.Popen(
            [sys.executable, "-m", "tests.support.mcp_servers", kind, "--port", str(port)],
            cwd=ROOT, stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    server = McpServerProcess(
        kind=kind, url=f"http://127.0.0.1:{port}/mcp", process=process, log_path=Path(log_name)
    )
    deadline = time.monotonic() + 30
    while not _answers(port):
        if process.poll() is not None or time.monotonic() > deadline:
            server.stop()
            raise RuntimeError(f"the {kind} MCP server did not start:\n{server.log()}")
        time.sleep(0.05)
    return server


def server_register(name: str, server: McpServerProcess, **fields: Any) -> Any:
    """`server` registered as the tool server `name` (a ToolServer), through the services;
    `fields` as `tool_server_create` takes them (auth, secret, groups, allowed_tools, ...),
    the groups made when missing."""
    from django.contrib.auth.models import Group

    from conversations import services

    for group in fields.get("groups") or []:
        Group.objects.get_or_create(name=group)
    return services.tool_server_create(actor=None, name=name, url=server.url, **fields)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("kind", choices=KINDS)
    parser.add_argument("--port", type=int, required=True)
    options = parser.parse_args()
    serve(options.kind, options.port)
