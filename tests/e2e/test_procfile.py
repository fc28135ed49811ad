"""`make run`'s process set: the Procfile under honcho answers a chat, and Ctrl-C stops it all.

The processes run as a developer's do (local settings, an embedded Valkey, the demo model),
on free ports and with their own Valkey data and beat schedule, so a `make run` already
going on the same machine is left alone. Only the database is the test run's.
"""

import base64
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from websockets.sync.client import connect

from accounts import services as account_services
from accounts.models import User
from conversations.engine import eventlog
from conversations.models import Message, Run
from tests.support.processes import ROOT, ChildProcess, database_url_for_tests
from tests.support.waiting import wait_until
from tests.support.web_server import free_port

pytestmark = pytest.mark.django_db(transaction=True)

# Set for the test run (by pytest-django, the redis_url fixture or a developer's shell), but
# this is `make run` with no REDIS_URL (so Valkey starts) and no key (so the demo answers).
NOT_INHERITED = ("REDIS_URL", "OPENAI_API_KEY", "OPENAI_BASE_URL", "DJANGO_SETTINGS_MODULE")
# A piece of each expected command line (as `ps` shows it) and what it is.
EXPECTED_PROCESSES = {
    "valkey-server": "the embedded Valkey",
    "daphne": "the web server",
    "config worker": "the Celery worker",
    "config beat": "Celery beat",
}
STOP_SECONDS = 15
PING_SECONDS = 1


def process_table() -> dict[int, tuple[int, str]]:
    """pid -> (parent pid, command line) of every live process; zombies count as gone."""
    # -ww: whole command lines, also when the output is not a terminal.
    listing = subprocess.run(
        ["ps", "-A", "-ww", "-o", "pid=,ppid=,stat=,args="],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    table: dict[int, tuple[int, str]] = {}
    for line in listing.splitlines():
        pid, ppid, stat, *command = line.split(None, 3)
        if not stat.startswith("Z"):
            table[int(pid)] = (int(ppid), command[0] if command else "")
    return table


def descendants(root: int) -> dict[int, str]:
    """pid -> command line of every live process below `root`."""
    table = process_table()
    found: dict[int, str] = {}
    parents = [root]
    while parents:
        parent = parents.pop()
        for pid, (ppid, command) in table.items():
            if ppid == parent and pid not in found:
                found[pid] = command
                parents.append(pid)
    return found


def still_running(processes: dict[int, str]) -> dict[int, str]:
    # The command line must match too: a pid may have been reused since.
    table = process_table()
    return {pid: cmd for pid, cmd in processes.items() if table.get(pid, (0, ""))[1] == cmd}


def honcho_start(tmp_path: Path, *, web_port: int, redis_port: int) -> ChildProcess:
    """`make run`'s last line. Its own session, so a signal to the group is a Ctrl-C."""
    empty_env_file = tmp_path / "empty.env"  # a developer's .env stays out of the test
    empty_env_file.touch()
    env = {name: value for name, value in os.environ.items() if name not in NOT_INHERITED}
    env |= {
        "PARLEY_HOST": "127.0.0.1",
        "PARLEY_PORT": str(web_port),
        "PARLEY_EMBEDDED_REDIS_PORT": str(redis_port),
        "PARLEY_EMBEDDED_REDIS_DIR": str(tmp_path / "valkey"),
        "PARLEY_BEAT_SCHEDULE": str(tmp_path / "celerybeat-schedule"),
        "PARLEY_WS_PING_SECONDS": str(PING_SECONDS),  # so the heartbeat shows in seconds
        "DATABASE_URL": database_url_for_tests(),
        "PYTHONUNBUFFERED": "1",
    }
    command = [
        sys.executable, "-m", "honcho", "start", "-f", "Procfile", "-e", str(empty_env_file),
        "valkey", "web", "worker", "beat",
    ]  # fmt: skip
    log_path = tmp_path / "honcho.log"
    with log_path.open("wb") as log_file:
        process = subprocess.Popen(
            command, cwd=ROOT, env=env, stdout=log_file, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
    return ChildProcess(process=process, log_path=log_path)


def accepts_connections(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


def api_post(port: int, path: str, key: str, body: dict[str, Any]) -> dict[str, Any]:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}",
        data=json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 201
        payload: dict[str, Any] = json.loads(response.read())
        return payload


def chat_over_websocket(port: int, conversation_id: str, key: str) -> list[dict[str, Any]]:
    """Ask the demo model a sum; the run's events, from the first to the terminal one."""
    url = f"ws://127.0.0.1:{port}/ws/conversations/{conversation_id}/"
    got: list[dict[str, Any]] = []
    with connect(url, additional_headers={"Authorization": f"Bearer {key}"}) as ws:
        assert json.loads(ws.recv(timeout=10))["type"] == "conversation.connected"
        ws.send(json.dumps({"type": "message.create", "content": "what is 12*7?"}))
        while not got or got[-1]["type"] not in eventlog.TERMINAL_TYPES:
            frame = json.loads(ws.recv(timeout=30))
            if "sequence_number" in frame:  # not a conversation notification
                got.append(frame)
    return got


def frames_until_ping(port: int, conversation_id: str, key: str, *, timeout: float) -> list[int]:
    """Opcodes of the frames an idle socket receives, up to the first ping (0x9). A raw
    socket: websocket clients answer pings without showing them."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as raw:
        handshake = (
            f"GET /ws/conversations/{conversation_id}/ HTTP/1.1\r\n"
            f"Host: 127.0.0.1:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Key: {base64.b64encode(os.urandom(16)).decode()}\r\n"
            f"Sec-WebSocket-Version: 13\r\nAuthorization: Bearer {key}\r\n\r\n"
        )
        raw.sendall(handshake.encode())
        stream = raw.makefile("rb")
        assert b" 101 " in stream.readline()
        while stream.readline() not in (b"\r\n", b""):
            pass  # the rest of the handshake's headers
        opcodes: list[int] = []
        while not opcodes or opcodes[-1] != 0x9:
            first, second = stream.read(2)
            length = second & 0x7F
            if length >= 126:
                length = int.from_bytes(stream.read(2 if length == 126 else 8), "big")
            stream.read(length)  # server frames are never masked
            opcodes.append(first & 0x0F)
        return opcodes


def test_make_run_processes_answer_a_chat_and_all_stop_on_ctrl_c(tmp_path):
    owner = User.objects.create_user(username="runner", password="pw-runner-123")
    key = account_services.api_key_create(owner=owner, name="make run")[1]
    web_port, redis_port = free_port(), free_port()
    honcho = honcho_start(tmp_path, web_port=web_port, redis_port=redis_port)
    seen: dict[int, str] = {}  # every process honcho started, for the cleanup below

    def all_started() -> bool:
        seen.update(descendants(honcho.process.pid))
        assert honcho.process.poll() is None, f"honcho exited early:\n{honcho.log()}"
        log = honcho.log()
        return (
            "embedded Valkey listening" in log
            and " ready." in log  # the worker
            and "beat: Starting" in log
            and accepts_connections(web_port)
        )

    try:
        wait_until(
            all_started,
            timeout=60,
            what="the four processes",
            interval=0.1,
            details=lambda: honcho.log()[-6000:],
        )
        for piece, what in EXPECTED_PROCESSES.items():
            assert any(piece in command for command in seen.values()), f"{what} is not running"

        conversation = api_post(web_port, "/api/v1/conversations/", key, {})
        got = chat_over_websocket(web_port, conversation["id"], key)

        assert [e["sequence_number"] for e in got] == list(range(len(got)))
        assert got[0]["type"] == "run.created"
        assert got[-1]["type"] == "run.completed", got[-1]
        assert any(e["type"] == "message.delta" for e in got)
        run = Run.objects.get(conversation_id=conversation["id"])
        assert run.status == Run.Status.COMPLETED
        reply = Message.objects.filter(run=run, role="assistant").order_by("seq").last()
        assert reply is not None
        assert "84" in reply.content
        assert eventlog.message_texts(got)[str(reply.id)] == reply.content

        # The heartbeat that keeps idle proxies from closing a quiet socket.
        started = time.monotonic()
        opcodes = frames_until_ping(web_port, conversation["id"], key, timeout=10)
        assert opcodes[0] == 0x1  # conversation.connected, a text frame
        assert opcodes[-1] == 0x9
        assert time.monotonic() - started < PING_SECONDS + 5

        seen.update(descendants(honcho.process.pid))
        os.killpg(honcho.process.pid, signal.SIGINT)  # what Ctrl-C in the terminal sends
        deadline = time.monotonic() + STOP_SECONDS
        while honcho.process.poll() is None or still_running(seen):
            if time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert still_running(seen) == {}, honcho.log()[-6000:]
        assert honcho.process.returncode == 130  # the shell's code for "stopped by SIGINT"
        # Each stopped on honcho's SIGTERM: none had to be killed after its grace period.
        assert "sending SIGKILL" not in honcho.log()
    finally:
        for pid in still_running(seen):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        honcho.kill()
