"""Conversation state benchmark: does a turn cost the same at 10 and 100,000 messages?

For conversations of each size it times (a) appending one user message, which allocates
seq under a row lock, and (b) building the model input, which reads a bounded tail; then
it deletes the largest conversation. Everything runs against the database in
DATABASE_URL (PostgreSQL; SQLite only with --allow-sqlite) as a throwaway `bench-*` user
whose rows are deleted at the end, also on error.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/parley .venv/bin/python -m bench.state
"""

import argparse
import itertools
import json
import os
import secrets
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from functools import partial
from random import Random
from typing import Any

from tqdm import tqdm

from bench.common import analyze, database_label, django_setup

django_setup("config.settings.local")

from django.core.management import call_command  # noqa: E402
from django.db import connection, transaction  # noqa: E402
from django.test.utils import CaptureQueriesContext, override_settings  # noqa: E402

from accounts.models import User  # noqa: E402
from conversations import selectors, services  # noqa: E402
from conversations.models import Conversation, Message, Run, UsageDay  # noqa: E402

TARGET_RATIO = 1.5
TARGET_DELETE_SECONDS = 2.0
BATCH = 5000
TOOL_TURN_SHARE = 0.4
VOCABULARY = (
    "the model returned a summary of quarterly revenue and asked whether the draft should "
    "mention churn pricing latency growth customers reported faster replies after caching"
)
WORDS = VOCABULARY.split()


@dataclass(frozen=True)
class Timing:
    samples_ms: list[float]
    queries: int
    items: int = 0  # length of the operation's result (messages in the model input)

    @property
    def median(self) -> float:
        return statistics.median(self.samples_ms)

    @property
    def p90(self) -> float:
        return statistics.quantiles(self.samples_ms, n=10, method="inclusive")[-1]


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="10,1000,100000", help="comma-separated sizes")
    parser.add_argument("--repeats", type=int, default=30, help="timed runs per measurement")
    parser.add_argument("--allow-sqlite", action="store_true", help="run on a non-PostgreSQL DB")
    args = parser.parse_args()
    args.sizes = sorted({int(size) for size in args.sizes.split(",")})
    if len(args.sizes) < 2 or args.sizes[0] < 1 or args.repeats < 2:
        parser.error("need at least two positive sizes and --repeats >= 2")
    return args


def prose(rng: Random, chars: int = 200) -> str:
    words: list[str] = []
    while sum(len(word) + 1 for word in words) < chars:
        words.append(rng.choice(WORDS))
    return " ".join(words).capitalize() + "."


def turns(rng: Random) -> Iterator[dict[str, Any]]:
    """Endless realistic turns: user, optional tool-call group, assistant reply."""
    while True:
        yield {"role": "user", "content": prose(rng)}
        if rng.random() < TOOL_TURN_SHARE:
            ids = [f"call_{secrets.token_hex(8)}" for _ in range(rng.randint(1, 2))]
            arguments = json.dumps({"expression": f"{rng.randint(1, 999)} * 1.2"})
            calls = [{"id": id_, "name": "calculator", "arguments": arguments} for id_ in ids]
            yield {"role": "assistant", "tool_calls": calls}
            for id_ in ids:
                yield {
                    "role": "tool",
                    "tool_call_id": id_,
                    "name": "calculator",
                    "content": prose(rng, 120),
                }
        yield {"role": "assistant", "content": prose(rng, 300)}


def rows(
    conversation: Conversation, size: int, rng: Random
) -> Iterator[tuple[Message, Run | None]]:
    """`size` messages in seq order. Each user message comes with the completed Run it
    triggered; the assistant and tool messages of that turn carry the run's id."""
    start = conversation.last_activity_at - timedelta(seconds=size)
    root = conversation.active_branch_id  # the root branch, made with the conversation
    assert root is not None
    run: Run | None = None
    for seq, fields in enumerate(itertools.islice(turns(rng), size), start=1):
        message = Message(
            conversation=conversation,
            branch_id=root,
            seq=seq,
            created_at=start + timedelta(seconds=seq),
            **fields,
        )
        if message.role == Message.Role.USER:
            run = Run(
                conversation=conversation,
                trigger_message_id=message.id,
                status=Run.Status.COMPLETED,
                iterations=1,
                created_at=message.created_at,
            )
            yield message, run
        else:
            message.run_id = run.id if run else None
            yield message, None


def build_conversation(owner: User, size: int, rng: Random) -> Conversation:
    """A conversation of `size` messages, bulk-inserted (not `size` service calls)."""
    conversation = Conversation.objects.create(
        owner=owner,
        title=f"bench {size:,}",
        system_prompt="You are a concise assistant for a small analytics team.",
        message_count=size,
    )
    stream = rows(conversation, size, rng)
    with tqdm(total=size, desc=f"building {size:,}", unit="msg", leave=False) as progress:
        while batch := list(itertools.islice(stream, BATCH)):
            # One transaction per batch: the run <-> message foreign keys are checked at commit.
            with transaction.atomic():
                Run.objects.bulk_create([run for _, run in batch if run])
                Message.objects.bulk_create([message for message, _ in batch])
            progress.update(len(batch))
    return conversation


def elapsed_ms(operation: Callable[[], object]) -> float:
    started = time.perf_counter()
    operation()
    return (time.perf_counter() - started) * 1000


def measure(operations: dict[int, Callable[[], Any]], repeats: int) -> dict[int, Timing]:
    """Warm each operation up once (counting its queries), then time them round-robin so
    drift on a noisy machine spreads over all sizes instead of landing on one."""
    queries: dict[int, int] = {}
    items: dict[int, int] = {}
    for size, operation in operations.items():
        with CaptureQueriesContext(connection) as captured:
            result = operation()
        queries[size] = len(captured)
        items[size] = len(result) if isinstance(result, list) else 0
    samples: dict[int, list[float]] = {size: [] for size in operations}
    for _ in range(repeats):
        for size, operation in operations.items():
            samples[size].append(elapsed_ms(operation))
    return {size: Timing(samples[size], queries[size], items[size]) for size in operations}


def report(
    build: dict[int, Timing],
    build_equal: dict[int, Timing],
    append: dict[int, Timing],
    delete_seconds: float,
    delete_queries: int,
) -> None:
    small, large = min(build), max(build)
    print(
        "| messages | append median ms | append p90 ms | append queries "
        "| build median ms | build p90 ms | build queries | input messages "
        f"| build, tail {small:,} median ms | input messages |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for size in build:
        a, b, e = append[size], build[size], build_equal[size]
        print(
            f"| {size:,} | {a.median:.2f} | {a.p90:.2f} | {a.queries} "
            f"| {b.median:.2f} | {b.p90:.2f} | {b.queries} | {b.items} "
            f"| {e.median:.2f} | {e.items} |"
        )
    print(f"\ndelete {large:,} messages: {delete_seconds:.2f} s, {delete_queries} queries\n")
    checks = (
        ("append", append, small),
        (f"build, tail {small:,}", build_equal, small),
        ("build, default tail", build, small),
        ("build, default tail", build, sorted(build)[1]),
    )
    for name, timings, base in checks:
        ratio = timings[large].median / timings[base].median
        verdict = "PASS" if ratio <= TARGET_RATIO else "FAIL"
        print(f"{name} {large:,}/{base:,}: {ratio:.2f}x (target <= {TARGET_RATIO}x) {verdict}")
    verdict = "PASS" if delete_seconds < TARGET_DELETE_SECONDS else "FAIL"
    print(
        f"delete {large:,}: {delete_seconds:.2f} s (target < {TARGET_DELETE_SECONDS:g} s) {verdict}"
    )


def run(owner: User, sizes: list[int], repeats: int) -> None:
    rng = Random(20240601)
    conversations = {size: build_conversation(owner, size, rng) for size in sizes}
    analyze(Conversation, Message, Run)
    # Build first: it only reads, so every size is measured at exactly its nominal length.
    build = measure(
        {
            size: partial(selectors.conversation_model_input, conversation=conversation)
            for size, conversation in conversations.items()
        },
        repeats,
    )
    # The same again with the tail capped at the smallest size, so every conversation sends
    # the model the same amount of history: what remains is the cost of length alone.
    with override_settings(PARLEY_CONTEXT_MAX_MESSAGES=sizes[0]):
        build_equal = measure(
            {
                size: partial(selectors.conversation_model_input, conversation=conversation)
                for size, conversation in conversations.items()
            },
            repeats,
        )
    content = prose(rng)
    append = measure(
        {
            size: partial(services.user_message_append, conversation=conversation, content=content)
            for size, conversation in conversations.items()
        },
        repeats,
    )
    with CaptureQueriesContext(connection) as captured:
        started = time.perf_counter()
        services.conversation_delete(conversation=conversations[sizes[-1]])
        delete_seconds = time.perf_counter() - started
    report(build, build_equal, append, delete_seconds, len(captured))


def main() -> int:
    args = parse_args()
    if connection.vendor != "postgresql" and not args.allow_sqlite:
        print(
            f"bench.state measures PostgreSQL, but the database is {connection.vendor} "
            f"({connection.settings_dict['NAME']}). Set DATABASE_URL=postgres://... "
            "or pass --allow-sqlite to run anyway.",
            file=sys.stderr,
        )
        return 2
    call_command("migrate", interactive=False, verbosity=0)
    print(
        f"bench.state on {database_label()}, {os.cpu_count()} CPUs, "
        f"repeats={args.repeats}, sizes={','.join(map(str, args.sizes))}\n"
    )
    owner = User.objects.create_user(username=f"bench-{secrets.token_hex(6)}")
    try:
        run(owner, args.sizes, args.repeats)
    finally:
        Conversation.objects.filter(owner=owner).delete()
        # A deleted account's usage stays in the dashboard's daily totals; this one's must not.
        UsageDay.objects.filter(owner=owner).delete()
        owner.delete()
        print(f"\ncleaned up user {owner.username} and its conversations")
    return 0


if __name__ == "__main__":
    sys.exit(main())
