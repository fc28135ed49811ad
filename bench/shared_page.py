"""Shared page benchmark: how long does a link to a long conversation take to open?

Builds, with bulk inserts (bench/branch_tree.py), conversations of 10 and 1,000 messages
(realistic turns, tool-call groups in about 40% of them, the path crossing two branches
as after an edit) for a throwaway `bench-*` user, and shares each (`services.share_create`,
public). Then it times, through the whole Django stack in-process, as an anonymous
reader, alternating the sizes in every round:

- the shared page, `GET /s/<token>/` (HTML rendered on the server);
- its JSON, `GET /api/v1/shared/<token>/`.

Each view counts one (an UPDATE), as a reader's would. Target: the page of 1,000 messages
≤ 100 ms p50 (server time), and the JSON alike. The share views' budget counters are in
Redis (REDIS_URL, or an embedded Valkey). Everything is deleted at the end, also on error
or when stopped. It measures PostgreSQL (DATABASE_URL); SQLite only with --allow-sqlite.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/parley_bench \\
        REDIS_URL=redis://127.0.0.1:6379/15 .venv/bin/python -m bench.shared_page
"""

import argparse
import secrets
import signal
import sys
from random import Random

from bench.common import (
    Timing,
    alternating_timed,
    analyze,
    database_label,
    database_refused,
    django_setup,
    getter,
    host_label,
    owner_delete,
    progress,
    requests_unthrottled,
)

django_setup("config.settings.local")

from django.conf import settings  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.test import Client  # noqa: E402
from django.test.utils import override_settings  # noqa: E402

from accounts.models import User  # noqa: E402
from bench.branch_tree import tree_build  # noqa: E402
from conversations import services  # noqa: E402
from conversations.models import Branch, Conversation, Message, Run, Share  # noqa: E402
from tests.support.redis_server import redis_start  # noqa: E402

TARGET_MS = 100.0
SIZES = (10, 1_000)
PLAIN_STATIC = "django.contrib.staticfiles.storage.StaticFilesStorage"
DOORS = {"GET /s/<token>/": "/s/", "GET shared/<token>/": "/api/v1/shared/"}


def sizes_arg(text: str) -> tuple[int, ...]:
    try:
        sizes = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError("comma-separated message counts") from None
    if not sizes or min(sizes) < 10:
        raise argparse.ArgumentTypeError("each conversation needs 10 messages or more")
    return sizes


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=sizes_arg, default=SIZES, help="e.g. 10,1000")
    parser.add_argument("--samples", type=int, default=100, help="timed requests per row")
    parser.add_argument("--allow-sqlite", action="store_true", help="run on a non-PostgreSQL DB")
    args = parser.parse_args()
    if args.samples < 2:
        parser.error("need --samples >= 2")
    return args


def report(
    results: dict[str, dict[int, Timing]], sizes: dict[str, dict[int, int]], samples: int
) -> bool:
    print(f"bench.shared_page on {database_label()}, {host_label()}, samples={samples}\n")
    print("| request | messages | KiB | p50 ms | p99 ms | queries | target | result |")
    print("|---|---:|---:|---:|---:|---:|---|---|")
    met_all = True
    largest = max(max(by_size) for by_size in results.values())
    for name, by_size in results.items():
        for messages, timing in by_size.items():
            targeted = messages == largest
            met = timing.median <= TARGET_MS
            met_all &= met or not targeted
            target = f"≤ {TARGET_MS:g} ms" if targeted else ""
            verdict = ("PASS" if met else "FAIL") if targeted else ""
            print(
                f"| {name} | {messages:,} | {sizes[name][messages] / 1024:.1f} "
                f"| {timing.median:.2f} | {timing.p99:.2f} | {timing.queries} "
                f"| {target} | {verdict} |"
            )
    return met_all


def main() -> int:
    args = parse_args()
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(f"stopped by signal {signum}"))
    if database_refused("shared_page", args.allow_sqlite):
        return 2
    call_command("migrate", interactive=False, verbosity=0)
    redis_url, redis_stop = redis_start()
    owner = User.objects.create_user(username=f"bench-shared-{secrets.token_hex(4)}")
    try:
        rng = Random(20261206)
        tokens: dict[int, str] = {}
        for length in args.messages:
            progress(f"building and sharing {length:,} messages…")
            tree = tree_build(owner, length=length, chain=2, rng=rng)
            tokens[length] = services.share_create(conversation=tree.conversation, user=owner)[1]
        analyze(Conversation, Branch, Message, Run, Share)
        client = Client(HTTP_HOST="localhost")  # anonymous, as whoever holds the link
        results: dict[str, dict[int, Timing]] = {}
        sizes: dict[str, dict[int, int]] = {}
        # The page's static URLs without a collected manifest (the bench runs no
        # `collectstatic`): a path joined where production looks one up in a dict.
        plain_static = override_settings(
            STORAGES={**settings.STORAGES, "staticfiles": {"BACKEND": PLAIN_STATIC}}
        )
        with requests_unthrottled(redis_url), plain_static:
            for name, prefix in DOORS.items():
                progress(f"timing {name}…")
                seen: dict[str, int] = {}
                urls = {n: f"{prefix}{token}/" for n, token in tokens.items()}
                calls = {n: getter(client, url, seen) for n, url in urls.items()}
                results[name] = alternating_timed(calls, args.samples)
                sizes[name] = {n: seen[url] for n, url in urls.items()}
        met = report(results, sizes, args.samples)
        views = sum(Share.objects.filter(created_by=owner).values_list("view_count", flat=True))
        expected = len(DOORS) * len(tokens) * (args.samples + 1)
        print(f"\nviews counted: {views:,} of {expected:,} requests")
        print(
            f"the shared conversation of {max(args.messages):,} messages within "
            f"{TARGET_MS:g} ms: {'PASS' if met else 'FAIL'}"
        )
    finally:
        owner_delete(owner)
        redis_stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
