"""REST API read benchmark: message pages, conversation pages and search at scale.

Builds, for a throwaway `bench-api-*` user: 1,000 conversations, one of
them with 100,000 messages, and 1,000,000 messages in all (the others share the rest), with
~200-character texts drawn from a skewed vocabulary so search words range from rare to
common. Each conversation gets its root branch, holding all its messages (bulk inserts
bypass Conversation.save(), which makes it). Messages are loaded with COPY (the search
index is built once, after the load). Then
it times, through the whole Django stack in-process with an API key (authentication,
throttle, view, JSON), round-robin:

- GET conversations/{id}/messages/?after=<random seq>&limit=200 in the 100,000 conversation;
- GET conversations/?limit=50, at random depths via the `next` cursors;
- GET search/?q=... for rare, medium and common words and a two-word query.

Everything the benchmark created is deleted at the end, also on error. It measures
PostgreSQL's search (DATABASE_URL); with --allow-sqlite it also runs on SQLite, loading by
bulk inserts and searching with SQLite's substring match.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/parley .venv/bin/python -m bench.api
"""

import argparse
import io
import itertools
import os
import platform
import secrets
import signal
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import partial
from random import Random
from typing import Any

from tqdm import tqdm

from bench.common import analyze, database_label, database_refused, django_setup

django_setup("config.settings.local")

from django.core.management import call_command  # noqa: E402
from django.db import connection, transaction  # noqa: E402
from django.test import Client  # noqa: E402
from django.test.utils import override_settings  # noqa: E402

from accounts import services as account_services  # noqa: E402
from accounts.models import User  # noqa: E402
from conversations import selectors  # noqa: E402
from conversations.models import Branch, Conversation, Message  # noqa: E402

CONVERSATIONS = 1_000
BIG = 100_000
TOTAL = 1_000_000
VOCABULARY_SIZE = 5_000
TARGETS_MS = {"messages": 20.0, "conversations": 20.0, "search": 50.0}
SYLLABLES = [c + v for c in "bdfgklmnprstvz" for v in ("a", "e", "i", "o", "u", "ai", "ou", "ea")]


@dataclass(frozen=True)
class Result:
    name: str
    samples_ms: list[float]
    queries: int
    detail: str

    def percentile(self, p: float) -> float:
        ordered = sorted(self.samples_ms)
        return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=200, help="timed requests per row")
    parser.add_argument("--total", type=int, default=TOTAL, help="messages in all")
    parser.add_argument("--big", type=int, default=BIG, help="messages in the big conversation")
    parser.add_argument("--conversations", type=int, default=CONVERSATIONS)
    parser.add_argument("--allow-sqlite", action="store_true", help="run on a non-PostgreSQL DB")
    args = parser.parse_args()
    if not args.conversations > 1 or not args.total > args.big > 200 or args.samples < 2:
        parser.error("need 2+ conversations, --total > --big > 200 and --samples >= 2")
    return args


def vocabulary(rng: Random) -> list[str]:
    words: set[str] = set()
    while len(words) < VOCABULARY_SIZE:
        words.add("".join(rng.choice(SYLLABLES) for _ in range(rng.randint(2, 4))))
    return sorted(words, key=lambda w: rng.random())


def zipf_weights(size: int, exponent: float = 1.05) -> list[float]:
    return [1 / (rank**exponent) for rank in range(1, size + 1)]


class Texts:
    """~200-character texts; word ranks follow a Zipf law, as in natural language."""

    def __init__(self, rng: Random, words: list[str]) -> None:
        self.rng = rng
        self.words = words
        # Pre-drawn pool: drawing 30 weighted words per row for 1M rows would dominate setup.
        self.pool = rng.choices(words, weights=zipf_weights(len(words)), k=200_000)

    def text(self) -> str:
        start = self.rng.randrange(len(self.pool) - 40)
        return " ".join(self.pool[start : start + self.rng.randint(25, 35)])


def copy_messages(rows: Any, count: int, label: str) -> None:
    """COPY rows (conversation_id, branch_id, seq, role, content, created_at) in chunks;
    bulk inserts outside PostgreSQL."""
    if connection.vendor != "postgresql":
        fields = ("conversation_id", "branch_id", "seq", "role", "content", "created_at")
        messages = (Message(**dict(zip(fields, row, strict=True))) for row in rows)
        with tqdm(total=count, desc=label, unit="msg", file=sys.stderr) as bar:
            while chunk := list(itertools.islice(messages, 5000)):
                bar.update(len(Message.objects.bulk_create(chunk)))
        return
    # Every NOT NULL column without a database default is named (copied, reasoning too).
    columns = (
        "(id, conversation_id, branch_id, seq, role, kind, content, reasoning, tool_calls, "
        "tool_call_id, name, copied, created_at)"
    )
    raw = connection.connection
    with tqdm(total=count, desc=label, unit="msg", file=sys.stderr) as bar:
        batch: list[str] = []

        def flush() -> None:
            statement = f"COPY {Message._meta.db_table} {columns} FROM STDIN"
            with raw.cursor() as cursor, cursor.copy(statement) as copy:
                copy.write("".join(batch))
            bar.update(len(batch))
            batch.clear()

        for conversation_id, branch_id, seq, role, content, created_at in rows:
            batch.append(
                f"{uuid.uuid4()}\t{conversation_id}\t{branch_id}\t{seq}\t{role}\tmessage\t"
                f"{content}\t\t[]\t\t\tf\t{created_at.isoformat()}\n"
            )
            if len(batch) >= 20_000:
                flush()
        if batch:
            flush()


def build(
    user: User, rng: Random, big_size: int, total: int, count: int
) -> tuple[Conversation, list[str]]:
    now = datetime.now(UTC)
    per_other, extra = divmod(total - big_size, count - 1)
    # Index 0 is the big one; each conversation's root branch holds its whole path.
    counts = [big_size] + [per_other + (1 if i < extra else 0) for i in range(count - 1)]
    conversations = [
        Conversation(
            owner=user,
            title=f"Conversation {i}",
            last_activity_at=now - timedelta(minutes=i),
            created_at=now - timedelta(days=30),
            message_count=counts[i],
            active_branch_id=uuid.uuid4(),
        )
        for i in range(count)
    ]
    roots = [
        Branch(
            id=c.active_branch_id,
            conversation=c,
            message_count=c.message_count,
            created_at=c.created_at,
        )
        for c in conversations
    ]
    # One transaction: a conversation and its root point at each other, checked at commit.
    with transaction.atomic():
        Conversation.objects.bulk_create(conversations, batch_size=1000)
        Branch.objects.bulk_create(roots, batch_size=1000)
    big = conversations[0]
    words = vocabulary(rng)
    texts = Texts(rng, words)
    sizes = {(c.pk, c.active_branch_id): c.message_count for c in conversations}
    start = now - timedelta(days=30)

    def rows() -> Any:
        for (conversation_id, branch_id), size in sizes.items():
            for seq in range(1, size + 1):
                role = "user" if seq % 2 else "assistant"
                created_at = start + timedelta(seconds=seq)
                yield conversation_id, branch_id, seq, role, texts.text(), created_at

    # One index build after the load is several times faster than upkeep per row.
    search_index_drop()
    try:
        copy_messages(rows(), sum(sizes.values()), "loading messages")
    finally:
        search_index_build()
    analyze(Message, Conversation, Branch)
    big.refresh_from_db()
    return big, words


def search_index_drop() -> None:
    """The GIN index over the stored search vector (PostgreSQL only)."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("DROP INDEX IF EXISTS message_search_vector")


def search_index_build() -> None:
    if connection.vendor == "postgresql":
        print("building the search index…", file=sys.stderr)
        with connection.cursor() as cursor:
            cursor.execute(
                "CREATE INDEX IF NOT EXISTS message_search_vector ON conversations_message "
                "USING gin (search_vector)"
            )


def cleanup(user: User) -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            "DELETE FROM conversations_message WHERE conversation_id IN "
            "(SELECT id FROM conversations_conversation WHERE owner_id = %s)",
            [user.pk],
        )
    search_index_build()  # the load may have been stopped without it
    Conversation.objects.filter(owner=user).delete()
    user.delete()


def matches(user: User, words: str) -> int:
    """The user's messages that search matches for `words`, by the search's own rule."""
    mine = Message.objects.filter(conversation__owner=user)
    return selectors.messages_matching(mine, words).count()


def measure(
    client: Client, name: str, urls: Callable[[], str], samples: int, detail: str
) -> Result:
    # Warm-up, with its queries counted (a wrapper, since each request resets Django's
    # own query log).
    executed: list[str] = []

    def count(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        executed.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(count):
        response = client.get(urls())
    assert response.status_code == 200, (name, response.status_code, response.content[:300])
    timings = []
    for _ in range(samples):
        url = urls()
        began = time.perf_counter()
        response = client.get(url)
        timings.append((time.perf_counter() - began) * 1000)
        assert response.status_code == 200
    return Result(name, timings, len(executed), detail)


def _stop(signum: int, frame: Any) -> None:
    raise SystemExit(f"stopped by signal {signum}")


def main() -> None:
    args = parse_args()
    # Stopping the benchmark (Ctrl-C, a timeout, kill) still runs the cleanup below.
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    if database_refused("api", args.allow_sqlite):
        sys.exit(2)
    call_command("migrate", verbosity=0)
    rng = Random(20261122)
    user = User.objects.create_user(username=f"bench-api-{secrets.token_hex(4)}")
    try:
        big, words = build(user, rng, args.big, args.total, args.conversations)
        total = Message.objects.filter(conversation__owner=user).count()
        # The throttle's counters in process memory: this machine runs no Redis for it.
        local_cache = override_settings(
            CACHES={"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}},
            PARLEY_API_THROTTLE_RATE="100000000/minute",
        )
        local_cache.enable()
        _, secret = account_services.api_key_create(owner=user, name="bench")
        client = Client(HTTP_AUTHORIZATION=f"Bearer {secret}", HTTP_HOST="localhost")

        cursors = ["/api/v1/conversations/?limit=50"]
        while len(cursors) < args.conversations // 50:
            following = client.get(cursors[-1]).json()["next"]
            if not following:
                break
            cursors.append(following)
        queries = {
            "rare word": words[2000],
            "medium word": words[200],
            "common word": words[20],
            "two words": f"{words[50]} {words[300]}",
        }
        results = []
        plan: list[tuple[str, Callable[[], str], str]] = [
            (
                "GET messages (200, random depth)",
                lambda: (
                    f"/api/v1/conversations/{big.pk}/messages/"
                    f"?limit=200&after={rng.randrange(0, args.big - 200)}"
                ),
                f"conversation of {args.big:,} messages",
            ),
            (
                "GET conversations (50, random depth)",
                lambda: rng.choice(cursors).replace("http://localhost", ""),
                f"{args.conversations:,} conversations",
            ),
        ]
        for label, q in queries.items():
            url = f"/api/v1/search/?q={q.replace(' ', '+')}&limit=20"
            plan.append(
                (
                    f"GET search ({label})",
                    partial(str, url),
                    f"{matches(user, q):,} matching of {total:,}",
                )
            )
        for name, urls, detail in tqdm(plan, desc="measuring", file=sys.stderr):
            results.append(measure(client, name, urls, args.samples, detail))
        report(results, args)
    finally:
        print("cleaning up…", file=sys.stderr)
        cleanup(user)


def report(results: list[Result], args: argparse.Namespace) -> None:
    out = io.StringIO()
    print(
        f"bench.api on {database_label()}, {os.cpu_count()} CPUs, Python "
        f"{platform.python_version()}, samples={args.samples}\n",
        file=out,
    )
    print("| request | data | p50 ms | p99 ms | target p50 | queries |", file=out)
    print("|---|---|---:|---:|---:|---:|", file=out)
    for result in results:
        kind = result.name.split()[1].rstrip("(")
        target = TARGETS_MS.get(kind)
        p50 = statistics.median(result.samples_ms)
        print(
            f"| {result.name} | {result.detail} | {p50:.2f} | {result.percentile(99):.2f} "
            f"| {f'≤ {target:g} ms' if target else ''} | {result.queries} |",
            file=out,
        )
    print(out.getvalue())


if __name__ == "__main__":
    main()
