"""Run creation benchmark (issue 19): what one `message.create` costs the web process.

In-process, against the database in DATABASE_URL (PostgreSQL; SQLite only with
--allow-sqlite) and the Redis in REDIS_URL, for a conversation of each size (10 and
10,000 stored messages by default, bulk-inserted; each path adds its own turns on top),
`--calls` sends through each entry point a web process has:

- `run_start`: the engine call behind the socket frame and `POST .../messages/`, given a
  conversation read once before (as a socket holds one);
- `chat_start`: the engine call behind `POST chat/`, by conversation id;
- socket frame: `ConversationConsumer.receive` of a `message.create` frame (with a
  `client_id`), as Daphne hands it over: the frame parsed, the socket's credential (an API
  key) checked, the message and run stored; following the run's events is left out (a
  socket does that whatever a frame costs);
- `POST messages/` and `POST chat/`: Django's test client with an API key, through the
  middleware, authentication, throttles and the view (`POST chat/` with
  PARLEY_CHAT_WAIT_SECONDS=0, so it answers 202 at once instead of waiting for a worker).

Per call it reports the median and p90 CPU of this whole process (`time.process_time`:
the calling thread, the database helper threads and the background loop that sends the
notifications), the median wall time, the SQL statements (every execute on any thread,
savepoints included; BEGIN and COMMIT are not statements here), the Redis commands
(everything redis-py sends, sync and asyncio: broker publish, event log, channel layer,
throttle cache) and the channel-layer group sends with the notifications they carry.
Between calls, untimed, the run is marked completed so the next one may start. Calls
alternate between the paths and sizes, so drift hits them alike; the first `--warm-up`
calls of each are left out. The bench user, its conversations, run logs and queued
steps are deleted at the end, also on error.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/parley REDIS_URL=redis://127.0.0.1:6379/0 \\
        .venv/bin/python -m bench.run_cost [--sizes 10,10000] [--calls 200]
"""

import argparse
import asyncio
import itertools
import json
import os
import secrets
import statistics
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from bench.common import Row, django_setup, pct, progress, table_print

django_setup("config.settings.local")

import redis  # noqa: E402
import redis.asyncio.connection as redis_async_connection  # noqa: E402
import redis.connection as redis_connection  # noqa: E402
from channels.layers import get_channel_layer  # noqa: E402
from django.conf import settings  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection, transaction  # noqa: E402
from django.db.backends import utils as db_utils  # noqa: E402
from django.test import AsyncClient  # noqa: E402
from django.test.utils import override_settings  # noqa: E402
from django.utils import timezone  # noqa: E402

from accounts.models import User  # noqa: E402
from accounts.services import api_key_create  # noqa: E402
from accounts.sockets import SocketCredential  # noqa: E402
from bench.common import database_refused, owner_delete  # noqa: E402
from conversations import selectors  # noqa: E402
from conversations.consumers import ConversationConsumer  # noqa: E402
from conversations.engine import chat_start, run_start  # noqa: E402
from conversations.models import Branch, Conversation, Message, Run  # noqa: E402

TARGET_CPU_MS = 3.0
TARGET_SENDS = 1
CONTENT = "What did we decide about the quarterly report's churn section?"
BATCH = 5000
SETTLE_SECONDS = 0.02


# --- counting what a call does ------------------------------------------------------------


@dataclass
class Counts:
    statements: int = 0
    redis: int = 0
    sends: int = 0
    notifications: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, name: str, n: int = 1) -> None:
        with self.lock:
            setattr(self, name, getattr(self, name) + n)

    def snapshot(self) -> tuple[int, int, int, int]:
        return self.statements, self.redis, self.sends, self.notifications


COUNTS = Counts()


def counters_install() -> None:
    """Count SQL statements, Redis commands and group sends from every thread."""
    wrapper: Any = db_utils.CursorWrapper  # its private methods are not in the stubs
    execute, executemany = wrapper._execute, wrapper._executemany

    def counted_execute(self: Any, *args: Any, **kwargs: Any) -> Any:
        COUNTS.add("statements")
        return execute(self, *args, **kwargs)

    def counted_executemany(self: Any, *args: Any, **kwargs: Any) -> Any:
        COUNTS.add("statements")
        return executemany(self, *args, **kwargs)

    wrapper._execute, wrapper._executemany = counted_execute, counted_executemany

    # A pipeline packs its commands together; a single command is packed by send_command
    # (sync) or pack_command (asyncio).
    singles = (
        (redis_connection.AbstractConnection, "send_command"),
        (redis_async_connection.AbstractConnection, "pack_command"),
    )
    for cls, name in singles:
        single: Any = getattr(cls, name)

        def one(self: Any, *args: Any, _single: Any = single, **kwargs: Any) -> Any:
            COUNTS.add("redis")
            return _single(self, *args, **kwargs)

        setattr(cls, name, one)
    for cls in (redis_connection.AbstractConnection, redis_async_connection.AbstractConnection):
        pack_many: Any = cls.pack_commands

        def many(self: Any, commands: Any, _pack: Any = pack_many) -> Any:
            commands = list(commands)
            COUNTS.add("redis", len(commands))
            return _pack(self, commands)

        cls.pack_commands = many  # type: ignore[method-assign]

    layer: Any = get_channel_layer()
    group_send = layer.group_send

    async def counted_send(group: str, message: dict[str, Any]) -> None:
        COUNTS.add("sends")
        bodies = message.get("bodies")
        COUNTS.add("notifications", len(bodies) if isinstance(bodies, list) else 1)
        await group_send(group, message)

    layer.group_send = counted_send


# --- the conversations --------------------------------------------------------------------


def conversation_build(owner: User, size: int) -> Conversation:
    """A conversation of `size` alternating user and assistant messages on its root branch,
    bulk-inserted with the counters a real one would have."""
    conversation = Conversation.objects.create(owner=owner, title=f"bench {size:,}")
    root = conversation.active_branch_id  # made with the conversation
    assert root is not None
    start = timezone.now() - timedelta(seconds=size)
    rows = (
        Message(
            conversation=conversation,
            branch_id=root,
            seq=seq,
            role="user" if seq % 2 else "assistant",
            content=f"message {seq}: " + "words of an ordinary reply " * 6,
            created_at=start + timedelta(seconds=seq),
        )
        for seq in range(1, size + 1)
    )
    while batch := list(itertools.islice(rows, BATCH)):
        Message.objects.bulk_create(batch)
    Branch.objects.filter(pk=root).update(message_count=size)
    Conversation.objects.filter(pk=conversation.pk).update(message_count=size)
    conversation.refresh_from_db()
    return conversation


def run_complete(run_id: str) -> None:
    Run.objects.filter(pk=run_id).update(status=Run.Status.COMPLETED, finished_at=timezone.now())


# --- the paths ----------------------------------------------------------------------------

Call = Callable[[], str]  # one message.create; returns the run id


@dataclass
class Path:
    name: str
    size: int
    call: Call
    cpu_ms: list[float] = field(default_factory=list)
    wall_ms: list[float] = field(default_factory=list)
    counted: list[tuple[int, int, int, int]] = field(default_factory=list)


def engine_path(conversation: Conversation) -> Call:
    def call() -> str:
        _, run = run_start(conversation=conversation, content=CONTENT)
        return str(run.pk)

    return call


def chat_path(owner: User, conversation: Conversation) -> Call:
    def call() -> str:
        _, _, run = chat_start(user=owner, message=CONTENT, conversation_id=conversation.pk)
        return str(run.pk)

    return call


def socket_path(
    owner: User, conversation: Conversation, key_id: Any, loop: asyncio.AbstractEventLoop
) -> Call:
    """The frame handed to the consumer on `loop`, which runs on a thread of its own all
    along, as a server's does (the channel layer keeps its connections per loop)."""
    consumer = ConversationConsumer()
    consumer.scope = {"user": owner, "url_route": {"kwargs": {"conversation_id": conversation.pk}}}
    consumer.conversation = selectors.conversation_get(user=owner, conversation_id=conversation.pk)
    consumer.credential = SocketCredential(user_id=owner.pk, api_key_id=key_id)

    def follow(run_id: str, *, after: int | None) -> None:
        consumer.following = run_id

    async def refuse(content: Any, close: bool = False) -> None:
        raise RuntimeError(f"the socket answered {content!r}")

    consumer._follow = follow  # type: ignore[method-assign]
    consumer.send_json = refuse  # type: ignore[method-assign]

    def call() -> str:
        frame = {"type": "message.create", "content": CONTENT, "client_id": secrets.token_hex(8)}
        received = consumer.receive(text_data=json.dumps(frame))
        asyncio.run_coroutine_threadsafe(received, loop).result()
        assert consumer.following is not None
        return consumer.following

    return call


def rest_path(
    client: AsyncClient,
    headers: dict[str, str],
    url: str,
    body: dict[str, Any],
    status: int,
    loop: asyncio.AbstractEventLoop,
) -> Call:
    """The request through Django's ASGI handler on `loop`, as an ASGI server hands it over:
    a sync view runs on the handler's thread, an async one on the loop."""

    def call() -> str:
        answered = client.post(url, body, content_type="application/json", headers=headers)
        response = asyncio.run_coroutine_threadsafe(answered, loop).result()
        if response.status_code != status:
            raise RuntimeError(f"{url}: {response.status_code} {response.content[:300]!r}")
        return str(response.json()["run"]["id"])

    return call


def measure(paths: list[Path], calls: int, warm_up: int) -> None:
    for done in range(calls + warm_up):
        for path in paths:
            before = COUNTS.snapshot()
            cpu, wall = time.process_time(), time.perf_counter()
            run_id = path.call()
            wall = time.perf_counter() - wall
            # What a call leaves to other threads (closing an event loop and its
            # connections) is its own cost, not the next call's: counted once it settled.
            time.sleep(SETTLE_SECONDS)
            cpu = time.process_time() - cpu
            after = COUNTS.snapshot()
            run_complete(run_id)
            if done >= warm_up:
                path.cpu_ms.append(cpu * 1000)
                path.wall_ms.append(wall * 1000)
                path.counted.append(tuple(b - a for a, b in zip(before, after, strict=True)))  # type: ignore[arg-type]
        if done % 50 == 0:
            progress(f"{done}/{calls + warm_up} calls per path")


def report(paths: list[Path]) -> None:
    print(
        "| path | messages | CPU median ms | CPU p90 ms | wall median ms | SQL statements "
        "| Redis commands | group sends | notifications |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for path in paths:
        columns = list(zip(*path.counted, strict=True))
        per_call = [f"{statistics.median(column):g}" for column in columns]
        print(
            f"| {path.name} | {path.size:,} | {statistics.median(path.cpu_ms):.2f} "
            f"| {pct(path.cpu_ms, 90):.2f} | {statistics.median(path.wall_ms):.2f} "
            f"| {' | '.join(per_call)} |"
        )
    print()
    rows: list[Row] = []
    for path in paths:
        cpu = statistics.median(path.cpu_ms)
        # Every call, not a typical one: each must send exactly one.
        sends = sorted({counted[2] for counted in path.counted})
        label = f"{path.name}, {path.size:,} messages"
        rows.append(
            (
                f"CPU per call, {label}",
                f"{cpu:.2f} ms",
                f"≤ {TARGET_CPU_MS:g} ms",
                cpu <= TARGET_CPU_MS,
            )
        )
        rows.append(
            (
                f"group sends per call, {label}",
                " or ".join(map(str, sends)),
                f"= {TARGET_SENDS} on every call",
                sends == [TARGET_SENDS],
            )
        )
    table_print(rows)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="10,10000", help="messages, comma-separated")
    parser.add_argument("--calls", type=int, default=200, help="timed calls per path and size")
    parser.add_argument("--warm-up", type=int, default=10, help="untimed calls first")
    parser.add_argument("--allow-sqlite", action="store_true", help="run on a non-PostgreSQL DB")
    args = parser.parse_args()
    args.sizes = [int(size) for size in args.sizes.split(",")]
    if args.calls < 2 or min(args.sizes) < 0:
        parser.error("need --calls >= 2 and sizes of 0 or more")
    return args


def queued_steps_drop() -> None:
    """The steps the calls enqueued: no worker takes them here."""
    client = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    client.delete(settings.CELERY_TASK_DEFAULT_QUEUE)


def main() -> int:
    args = parse_args()
    if database_refused("run_cost", args.allow_sqlite):
        return 2
    call_command("migrate", interactive=False, verbosity=0)
    print(
        f"bench.run_cost on {connection.vendor}, {os.cpu_count()} CPUs, calls={args.calls}, "
        f"sizes={','.join(map(str, args.sizes))}\n"
    )
    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, name="socket-loop", daemon=True).start()
    owner = User.objects.create_user(username=f"bench-{secrets.token_hex(6)}")
    key, secret = api_key_create(owner=owner, name="bench")
    client = AsyncClient()
    headers = {"Authorization": f"Bearer {secret}"}
    try:
        paths: list[Path] = []
        for size in args.sizes:
            progress(f"building the conversations of {size:,} messages")
            built = [conversation_build(owner, size) for _ in range(5)]
            paths += [
                Path("engine run_start", size, engine_path(built[0])),
                Path("engine chat_start", size, chat_path(owner, built[1])),
                Path("socket message.create", size, socket_path(owner, built[2], key.pk, loop)),
                Path(
                    "POST messages/",
                    size,
                    rest_path(
                        client,
                        headers,
                        f"/api/v1/conversations/{built[3].pk}/messages/",
                        {"content": CONTENT},
                        202,
                        loop,
                    ),
                ),
                Path(
                    "POST chat/",
                    size,
                    rest_path(
                        client,
                        headers,
                        "/api/v1/chat/",
                        {"message": CONTENT, "conversation_id": str(built[4].pk)},
                        202,
                        loop,
                    ),
                ),
            ]
        counters_install()
        with override_settings(
            ALLOWED_HOSTS=[*settings.ALLOWED_HOSTS, "testserver"],
            PARLEY_CHAT_WAIT_SECONDS=0,
            PARLEY_API_THROTTLE_RATE="1000000/minute",
            PARLEY_API_MODEL_THROTTLE_RATE="1000000/minute",
        ):
            measure(paths, args.calls, args.warm_up)
        report(paths)
    finally:
        queued_steps_drop()
        with transaction.atomic():
            owner_delete(owner)
    return 0


if __name__ == "__main__":
    sys.exit(main())
