"""What a step costs the worker outside streaming (issue 19): the lease, the model input,
handing the reply to the streaming loop, and storing it.

In-process, against the database in DATABASE_URL (PostgreSQL; SQLite only with
--allow-sqlite) and the Redis in REDIS_URL, on conversations of `--sizes` stored
messages: each call starts a run as the web process does (untimed), then takes its first
step as a worker's task does (`runner.run_step`) and waits for the reply to be stored.
The provider answers at once with a one-word reply from memory, so what is measured is
the step itself, not a stream: no upstream, no HTTP.

Per step it reports the median and p90 CPU of this whole process (`time.process_time`:
the step's thread, the streaming loop and the store thread), the median wall time, and
the SQL statements and Redis commands sent (every thread; BEGIN and COMMIT are not
statements here). Sizes alternate, so drift hits them alike; the first `--warm-up` steps
of each are left out. The bench user, its conversations and run logs are deleted at the
end, also on error.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/parley REDIS_URL=redis://127.0.0.1:6379/0 \\
        .venv/bin/python -m bench.step_cost [--sizes 10,10000] [--steps 200]
"""

import argparse
import os
import statistics
import sys
import threading
import time
from collections.abc import AsyncGenerator
from typing import Any

from bench.common import Row, django_setup, pct, progress, table_print

django_setup("config.settings.local")

import redis.connection as redis_connection  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402
from django.db.backends import utils as db_utils  # noqa: E402

from accounts.models import User  # noqa: E402
from bench.common import database_refused, owner_delete  # noqa: E402
from conversations import engine, services  # noqa: E402
from conversations.engine import dispatch, runner  # noqa: E402
from conversations.engine.llm.base import Finished, StreamEvent, TextDelta  # noqa: E402
from conversations.models import Branch, Conversation, Message, Run  # noqa: E402

TARGET_CPU_MS = 5.0


class Counts:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.statements = self.redis = 0

    def add(self, name: str) -> None:
        with self.lock:
            setattr(self, name, getattr(self, name) + 1)


COUNTS = Counts()


def counters_install() -> None:
    """Count SQL statements and Redis commands from every thread."""
    execute = db_utils.CursorWrapper._execute  # type: ignore[attr-defined]

    def counted_execute(self: Any, *args: Any, **kwargs: Any) -> Any:
        COUNTS.add("statements")
        return execute(self, *args, **kwargs)

    db_utils.CursorWrapper._execute = counted_execute  # type: ignore[attr-defined]
    send = redis_connection.AbstractConnection.send_command
    pack_many = redis_connection.AbstractConnection.pack_commands

    def counted_send(self: Any, *args: Any, **kwargs: Any) -> Any:
        COUNTS.add("redis")
        return send(self, *args, **kwargs)

    def counted_pack_many(self: Any, commands: Any) -> Any:
        commands = list(commands)
        for _ in commands:
            COUNTS.add("redis")
        return pack_many(self, commands)

    redis_connection.AbstractConnection.send_command = counted_send  # type: ignore[method-assign]
    redis_connection.AbstractConnection.pack_commands = counted_pack_many  # type: ignore[method-assign]


class AtOnce:
    """A provider that answers at once, from memory."""

    name = "at-once"

    async def stream(self, **_: Any) -> AsyncGenerator[StreamEvent, None]:
        yield TextDelta("Done.")
        yield Finished("stop")


def conversation_seed(owner: User, size: int) -> Conversation:
    conversation = services.conversation_create(owner=owner, title=f"{size} messages")
    branch = conversation.active_branch
    roles = [Message.Role.USER, Message.Role.ASSISTANT]
    Message.objects.bulk_create(
        [
            Message(
                conversation=conversation,
                branch=branch,
                seq=seq,
                role=roles[seq % 2 == 0],
                content=f"message {seq} " + "words " * 20,
            )
            for seq in range(1, size + 1)
        ],
        batch_size=2000,
    )
    Conversation.objects.filter(pk=conversation.pk).update(message_count=size)
    Branch.objects.filter(conversation=conversation).update(message_count=size)
    conversation.refresh_from_db()
    return conversation


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="10,10000")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--warm-up", type=int, default=10)
    parser.add_argument("--allow-sqlite", action="store_true", help="run on a non-PostgreSQL DB")
    args = parser.parse_args()
    if database_refused("step_cost", args.allow_sqlite):
        return 2
    call_command("migrate", interactive=False, verbosity=0)
    sizes = [int(size) for size in args.sizes.split(",")]
    print(
        f"bench.step_cost on {connection.vendor}, {os.cpu_count()} CPUs, steps={args.steps}, "
        f"sizes={','.join(map(str, sizes))}\n"
    )
    counters_install()
    runner.provider_get = AtOnce

    def step_enqueue(run_id: str, *, countdown: float = 0) -> None:
        """The next step is not wanted: each measured run ends with its first."""

    dispatch.step_enqueue = step_enqueue
    owner = User.objects.create_user(username=f"bench-steps-{time.time_ns()}", password="x")
    try:
        conversations = {size: conversation_seed(owner, size) for size in sizes}
        samples: dict[int, list[tuple[float, float, int, int]]] = {size: [] for size in sizes}
        for number in range(args.steps + args.warm_up):
            for size in sizes:
                _, run = engine.run_start(conversation=conversations[size], content="Go on")
                statements, commands = COUNTS.statements, COUNTS.redis
                cpu, wall = time.process_time(), time.perf_counter()
                streaming = runner.run_step(str(run.id))
                if streaming is not None:
                    streaming.result(timeout=30)
                cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
                if Run.objects.get(pk=run.pk).status != Run.Status.COMPLETED:
                    raise RuntimeError(f"run {run.id} did not complete")
                if number >= args.warm_up:
                    samples[size].append(
                        (
                            cpu * 1000,
                            wall * 1000,
                            COUNTS.statements - statements,
                            COUNTS.redis - commands,
                        )
                    )
            if number % 50 == 0:
                progress(f"{number}/{args.steps + args.warm_up} steps per size")
        rows: list[Row] = []
        for size in sizes:
            cpu_ms = [sample[0] for sample in samples[size]]
            median = statistics.median(cpu_ms)
            label = f"{size:,} messages"
            rows.append(
                (
                    f"CPU per step, {label} (median / p90)",
                    f"{median:.2f} / {pct(cpu_ms, 90):.2f} ms",
                    f"<= {TARGET_CPU_MS:g} ms",
                    median <= TARGET_CPU_MS,
                )
            )
            wall_ms = statistics.median(sample[1] for sample in samples[size])
            statements_median = statistics.median(sample[2] for sample in samples[size])
            commands_median = statistics.median(sample[3] for sample in samples[size])
            rows.append((f"wall per step, {label}", f"{wall_ms:.2f} ms", "", None))
            rows.append(
                (
                    f"SQL statements / Redis commands, {label}",
                    f"{statements_median:g} / {commands_median:g}",
                    "",
                    None,
                )
            )
        table_print(rows)
    finally:
        owner_delete(owner)
    return 0


if __name__ == "__main__":
    sys.exit(main())
