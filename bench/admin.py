"""Admin benchmark: the moderation pages and bulk operations on a large database.

Seeds 100,000 conversations owned by 1,000 users, with 1,000,000 messages, using COPY:
100 "long" conversations of 10,000 messages each (user turns, assistant replies with
token usage, tool calls and results, one completed run per user turn) and 99,900
conversations holding only metadata, with activity spread over 90 days. Each conversation
gets its root branch (the active one, holding all its messages), which COPY does not make
as Conversation.save() does. COPY bypasses the services, so the usage rollup is then
filled the way the migration fills it (timed). Then,
through the real admin (Django's test client, signed in as a superuser, DEBUG off), it
measures:

- the conversation changelist: default page, a deep page, a filter, searches (p50, p90);
- the usage dashboard over the last 30 days, read from the rollup;
- the transcript's first page of a 10,000-message conversation (each view is audited);
- the JSONL export action over the 100 long conversations (1,000,000 messages), run in
  a child process so its peak RSS is its own: messages/s and peak RSS;
- the delete action on those 100 conversations (confirmation skipped, audited).

Everything runs as throwaway `bench-admin-*` users whose rows (and the audit events the
benchmark wrote) are removed at the end, also on error. It measures PostgreSQL
(DATABASE_URL); with --allow-sqlite it also runs on SQLite, seeding by bulk inserts
(bench/admin_seed.py). `--users`, `--conversations`, `--long` and `--long-messages` set
the sizes.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/parley .venv/bin/python -m bench.admin
"""

import argparse
import json
import os
import secrets
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterable
from functools import partial
from random import Random
from typing import Any

from bench.common import database_label, database_refused, django_setup

django_setup("config.settings.local")

from django.core.management import call_command  # noqa: E402
from django.db import models  # noqa: E402
from django.test import Client  # noqa: E402
from django.test.utils import override_settings  # noqa: E402
from django.urls import reverse  # noqa: E402

from accounts.models import User  # noqa: E402
from bench.admin_seed import seed, usage_fill  # noqa: E402
from conversations import services  # noqa: E402
from conversations.models import (  # noqa: E402
    AuditEvent,
    Branch,
    Conversation,
    Message,
    UsageDay,
)

USERS = 1_000
CONVERSATIONS = 100_000
LONG_CONVERSATIONS = 100
LONG_MESSAGES = 10_000
REPEATS = 30
TARGETS = {
    "changelist_p50_ms": 300.0,
    "transcript_p50_ms": 200.0,
    "export_messages_per_s": 50_000.0,
    "export_peak_rss_mb": 200.0,
    "delete_s": 5.0,
    "usage_p50_ms": 300.0,
    "search_p50_ms": 300.0,
}
CHANGELIST = reverse("admin:conversations_conversation_changelist")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--users", type=int, default=USERS, help="conversation owners")
    parser.add_argument("--conversations", type=int, default=CONVERSATIONS)
    parser.add_argument("--long", type=int, default=LONG_CONVERSATIONS)
    parser.add_argument("--long-messages", type=int, default=LONG_MESSAGES)
    parser.add_argument("--repeats", type=int, default=REPEATS)
    parser.add_argument("--allow-sqlite", action="store_true", help="run on a non-PostgreSQL DB")
    # Internal: the export measurement, run in a child process.
    parser.add_argument("--export-child", metavar="JSON", help=argparse.SUPPRESS)
    return parser.parse_args()


# --- measurements ----------------------------------------------------------------------


def timed_ms(operation: Callable[[], Any]) -> float:
    started = time.perf_counter()
    operation()
    return (time.perf_counter() - started) * 1000


def get_ok(client: Client, url: str) -> None:
    response = client.get(url)
    if response.status_code != 200:
        raise RuntimeError(f"GET {url} answered {response.status_code}")


def pages(client: Client, urls: dict[str, str], repeats: int) -> dict[str, list[float]]:
    """Warm each page up twice, then time them round-robin (drift hits all alike)."""
    for url in urls.values():
        get_ok(client, url)
        get_ok(client, url)
    samples: dict[str, list[float]] = {name: [] for name in urls}
    for _ in range(repeats):
        for name, url in urls.items():
            samples[name].append(timed_ms(partial(get_ok, client, url)))
    return samples


def peak_rss_mb() -> float:
    """This process's peak resident set (VmHWM). Not getrusage's ru_maxrss: on Linux a
    child inherits its parent's figure through fork and exec, and the parent seeded."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def export_child(spec: str) -> None:
    """In a fresh process: sign in, run the JSONL export action, read the whole stream."""
    options = json.loads(spec)
    client = Client(HTTP_HOST="localhost")
    client.force_login(User.objects.get(username=options["username"]))
    baseline = peak_rss_mb()
    started = time.perf_counter()
    response = client.post(
        CHANGELIST,
        {"action": "export_jsonl", "_selected_action": options["ids"], "index": "0"},
    )
    size = lines = 0
    chunks: Iterable[bytes] = getattr(response, "streaming_content", [])
    for chunk in chunks:
        size += len(chunk)
        lines += chunk.count(b"\n")
    seconds = time.perf_counter() - started
    peak = peak_rss_mb()
    print(
        json.dumps(
            {
                "seconds": seconds,
                "bytes": size,
                "lines": lines,
                "baseline_mb": baseline,
                "peak_mb": peak,
            }
        )
    )


def export_measure(root: User, ids: list[uuid.UUID]) -> dict[str, float]:
    spec = json.dumps({"username": root.username, "ids": [str(i) for i in ids]})
    done = subprocess.run(
        [sys.executable, "-m", "bench.admin", "--export-child", spec],
        check=True,
        capture_output=True,
        text=True,
    )
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def p50(samples: list[float]) -> float:
    return statistics.median(samples)


def p90(samples: list[float]) -> float:
    return statistics.quantiles(samples, n=10, method="inclusive")[-1]


def verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def run(args: argparse.Namespace, prefix: str) -> None:
    rng = Random(20241122)
    started = time.perf_counter()
    root, long_ids = seed(prefix, args, rng)
    seed_s = time.perf_counter() - started
    messages = args.long * args.long_messages
    print(f"seeded {args.conversations:,} conversations, {messages:,} messages in {seed_s:.0f} s")
    fill_s = usage_fill()

    client = Client(HTTP_HOST="localhost")
    client.force_login(root)
    some_owner = User.objects.filter(username__startswith=prefix, is_superuser=False).first()
    assert some_owner is not None
    target = long_ids[len(long_ids) // 2]
    transcript = reverse("admin:conversations_conversation_transcript", args=[target])
    last_page = -(-args.long_messages // 100)
    deep = max(1, args.conversations // 200)
    lists = pages(
        client,
        {
            "changelist, first page": CHANGELIST,
            f"changelist, page {deep:,}": f"{CHANGELIST}?p={deep}",
            "changelist, filter flagged": f"{CHANGELIST}?flagged__exact=1",
            "changelist, filter model + archived": f"{CHANGELIST}?model=llama3.1:8b&archived=no",
            "changelist, search owner": f"{CHANGELIST}?q={some_owner.username}",
            "changelist, search exact id": f"{CHANGELIST}?q={long_ids[-1]}",
            "changelist, search title word": f"{CHANGELIST}?q=revenue",
            f"transcript page 1 ({args.long_messages:,} msgs)": transcript,
            f"transcript page {last_page}": f"{transcript}?page={last_page}",
            "message list (1M rows)": reverse("admin:conversations_message_changelist"),
            "usage dashboard (30 days)": reverse("admin:conversations_conversation_usage"),
        },
        args.repeats,
    )

    export = export_measure(root, long_ids)
    rate = messages / export["seconds"]

    delete_started = time.perf_counter()
    response = client.post(
        CHANGELIST,
        {
            "action": "delete_selected",
            "_selected_action": [str(i) for i in long_ids],
            "apply": "yes",
        },
    )
    delete_s = time.perf_counter() - delete_started
    assert response.status_code == 302, response.status_code
    left = Message.objects.filter(conversation_id__in=long_ids).count()
    assert left == 0, left
    left = Branch.objects.filter(conversation_id__in=long_ids).count()
    assert left == 0, left

    label = database_label()
    print(f"\nbench.admin on {label}, {os.cpu_count()} CPUs, repeats={args.repeats}\n")
    print("| page | p50 ms | p90 ms |")
    print("|---|---:|---:|")
    for name, samples in lists.items():
        print(f"| {name} | {p50(samples):.1f} | {p90(samples):.1f} |")
    print()
    print("| bulk operation | result |")
    print("|---|---:|")
    print(
        f"| JSONL export, {messages:,} messages in {args.long} conversations "
        f"| {export['seconds']:.1f} s, {rate:,.0f} messages/s, "
        f"{export['bytes'] / 1e6:,.0f} MB |"
    )
    print(
        f"| JSONL export, peak RSS of the process | {export['peak_mb']:.0f} MB "
        f"(after start-up: {export['baseline_mb']:.0f} MB) |"
    )
    print(
        f"| delete {args.long} conversations of {args.long_messages:,} messages "
        f"| {delete_s:.2f} s |"
    )
    print(f"| usage rollup filled from {messages:,} messages (rebuild_usage) | {fill_s:.1f} s |")
    print()
    first = lists["changelist, first page"]
    checks = [
        ("changelist p50", p50(first), TARGETS["changelist_p50_ms"], "ms", p50(first) <= 300),
        (
            "transcript first page p50",
            p50(lists[f"transcript page 1 ({args.long_messages:,} msgs)"]),
            TARGETS["transcript_p50_ms"],
            "ms",
            p50(lists[f"transcript page 1 ({args.long_messages:,} msgs)"])
            <= TARGETS["transcript_p50_ms"],
        ),
    ]
    for name in (
        "usage dashboard (30 days)",
        "changelist, search owner",
        "changelist, search title word",
    ):
        limit = TARGETS["usage_p50_ms" if name.startswith("usage") else "search_p50_ms"]
        value = p50(lists[name])
        checks.append((f"{name} p50", value, limit, "ms", value <= limit))
    for name, value, limit, unit, ok in checks:
        print(f"{name}: {value:.1f} {unit} (target <= {limit:g} {unit}) {verdict(ok)}")
    print(
        f"JSONL export: {rate:,.0f} messages/s (target >= 50,000) "
        f"{verdict(rate >= TARGETS['export_messages_per_s'])}"
    )
    print(
        f"JSONL export peak RSS: {export['peak_mb']:.0f} MB (target <= 200 MB) "
        f"{verdict(export['peak_mb'] <= TARGETS['export_peak_rss_mb'])}"
    )
    print(f"delete: {delete_s:.2f} s (target <= 5 s) {verdict(delete_s <= TARGETS['delete_s'])}")


def cleanup(prefix: str) -> None:
    users = User.objects.filter(username__startswith=prefix)
    ids = list(users.values_list("pk", flat=True))
    services.conversations_delete(actor=None, queryset=Conversation.objects.filter(owner__in=ids))
    # Searches' events name no owner, only their actor (cleared when the user goes).
    AuditEvent.objects.filter(models.Q(owner_id__in=ids) | models.Q(actor_id__in=ids)).delete()
    # A deleted account's usage stays in the daily totals; the benchmark's must not.
    UsageDay.objects.filter(owner_id__in=ids).delete()
    users.delete()


# DEBUG is off, so the manifest storage would want collectstatic; pages only need URLs.
PLAIN_STATIC = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
}


def main() -> None:
    args = parse_args()
    if args.export_child:
        with override_settings(STORAGES=PLAIN_STATIC):
            export_child(args.export_child)
        return
    if database_refused("admin", args.allow_sqlite):
        sys.exit(2)
    call_command("migrate", verbosity=0)
    prefix = f"bench-admin-{secrets.token_hex(3)}-"
    # Deletes notify open sockets through the channel layer, as in production.
    from tests.support.redis_server import redis_start

    _, redis_stop = redis_start()
    try:
        with override_settings(STORAGES=PLAIN_STATIC):
            run(args, prefix)
    finally:
        print("\ncleaning up…", file=sys.stderr)
        cleanup(prefix)
        redis_stop()


if __name__ == "__main__":
    main()
