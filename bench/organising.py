"""Organised sidebar benchmark: does the sidebar cost the same for a user with 10,000
conversations in folders and under tags as for one with 100?

Builds, with bulk inserts, two throwaway `bench-organising-*` users (sizes: conversations,
folders, tags, pinned): 10,000, 50, 200, 500 and 100, 5, 20, 5. Their conversations'
activity is spread over a year; the pinned ones are drawn at random, about half of them
are in a folder and each carries 0 to 3 tags, folders and tags drawn with Zipf weights
(a few big ones, a long tail), and each holds 0 to 4 messages (the list reads none).
Then it times, through the whole Django stack in-process, signed in as the sidebar is
(session cookie), alternating the two users in every round:

- the sidebar's first page, `GET conversations/?archived=false&limit=30`, pinned first;
- a tag filter, `?tag=<name>`, for the most used tag and for the least used one;
- a folder's listing, `?folder=<id>`, of the biggest folder;
- `GET tags/` and `GET folders/` (no target: they list everything the user has).

Each answer is checked before it is timed: the pinned ones come first, a filter returns
only what it names. Targets: p50 ≤ 30 ms at 10,000 conversations and ≤ 1.5 times the same
request at 100. The request budgets' counters are in Redis (REDIS_URL, or an embedded
Valkey). Everything is deleted at the end, also on error or when stopped. It measures
PostgreSQL (DATABASE_URL); SQLite only with --allow-sqlite.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/parley_bench \\
        REDIS_URL=redis://127.0.0.1:6379/15 .venv/bin/python -m bench.organising
"""

import argparse
import secrets
import signal
import sys
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from random import Random
from typing import Any, NamedTuple

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

from django.core.management import call_command  # noqa: E402
from django.db import transaction  # noqa: E402
from django.test import Client  # noqa: E402
from django.utils import timezone  # noqa: E402

from accounts.models import User  # noqa: E402
from bench.state import prose  # noqa: E402
from conversations.models import (  # noqa: E402
    Branch,
    Conversation,
    ConversationTag,
    Folder,
    Message,
    Tag,
)
from tests.support.redis_server import redis_start  # noqa: E402

TARGET_MS = 30.0
TARGET_RATIO = 1.5
PAGE = 30  # the sidebar's page (web/static/web/sidebar.js)
LIST = f"/api/v1/conversations/?archived=false&limit={PAGE}"
MAX_MESSAGES = 4
BATCH = 2000


class Size(NamedTuple):
    conversations: int
    folders: int
    tags: int
    pinned: int

    def label(self) -> str:
        return (
            f"{self.conversations:,} conversations, {self.folders} folders, "
            f"{self.tags} tags, {self.pinned} pinned"
        )


@dataclass(frozen=True)
class Sidebar:
    """A user's organised conversations and what the requests ask for."""

    owner: User
    pinned: set[str]
    common_tag: str
    rare_tag: str
    tagged: dict[str, set[str]]  # tag name -> its conversations' ids
    big_folder: str
    foldered: set[str]  # the big folder's conversations' ids


def size_arg(text: str) -> Size:
    try:
        size = Size(*(int(part) for part in text.split(",")))
    except (TypeError, ValueError):
        raise argparse.ArgumentTypeError("conversations,folders,tags,pinned") from None
    if min(size) < 1 or size.pinned > size.conversations:
        raise argparse.ArgumentTypeError("each at least 1, pinned at most conversations")
    return size


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--small", type=size_arg, default=Size(100, 5, 20, 5))
    parser.add_argument("--large", type=size_arg, default=Size(10_000, 50, 200, 500))
    parser.add_argument("--samples", type=int, default=200, help="timed requests per row")
    parser.add_argument("--allow-sqlite", action="store_true", help="run on a non-PostgreSQL DB")
    args = parser.parse_args()
    if args.samples < 2:
        parser.error("need --samples >= 2")
    return args


def zipf(count: int) -> list[float]:
    return [1 / rank for rank in range(1, count + 1)]


def messages_of(conversation: Conversation, branch: Branch, rng: Random) -> Iterator[Message]:
    count = conversation.message_count
    for seq in range(1, count + 1):
        yield Message(
            conversation=conversation,
            branch=branch,
            seq=seq,
            role="user" if seq % 2 else "assistant",
            content=prose(rng, 200 if seq % 2 else 300),
            created_at=conversation.last_activity_at - timedelta(seconds=count - seq),
        )


def sidebar_build(owner: User, size: Size, rng: Random) -> Sidebar:
    progress(f"building {size.label()}…")
    now = timezone.now()
    folders = Folder.objects.bulk_create(
        Folder(owner=owner, name=f"Folder {n:03}", position=n) for n in range(size.folders)
    )
    tags = Tag.objects.bulk_create(Tag(owner=owner, name=f"tag-{n:03}") for n in range(size.tags))
    pinned = set(rng.sample(range(size.conversations), size.pinned))
    folder_weights, tag_weights = zipf(size.folders), zipf(size.tags)
    conversations = []
    for n in range(size.conversations):
        in_folder = rng.random() < 0.5
        conversations.append(
            Conversation(
                owner=owner,
                title=prose(rng, 40),
                created_at=now - timedelta(days=400),
                last_activity_at=now - timedelta(seconds=rng.randrange(365 * 86_400)),
                message_count=rng.randint(0, MAX_MESSAGES),
                active_branch_id=uuid.uuid4(),
                pinned=n in pinned,
                folder=rng.choices(folders, folder_weights)[0] if in_folder else None,
            )
        )
    links: list[ConversationTag] = []
    for conversation in conversations:
        chosen: set[Tag] = set()
        for _ in range(rng.randint(0, 3)):
            chosen.add(rng.choices(tags, tag_weights)[0])
        links.extend(ConversationTag(conversation=conversation, tag=tag) for tag in chosen)
    for start in range(0, len(conversations), BATCH):
        batch = conversations[start : start + BATCH]
        # A conversation and its root branch point at each other, checked at commit.
        with transaction.atomic():
            Conversation.objects.bulk_create(batch)
            roots = Branch.objects.bulk_create(
                Branch(
                    id=c.active_branch_id,
                    conversation=c,
                    message_count=c.message_count,
                    created_at=c.created_at,
                )
                for c in batch
            )
            Message.objects.bulk_create(
                message
                for c, root in zip(batch, roots, strict=True)
                for message in messages_of(c, root, rng)
            )
    ConversationTag.objects.bulk_create(links, batch_size=BATCH)
    tagged: dict[str, set[str]] = {tag.name: set() for tag in tags}
    for link in links:
        tagged[link.tag.name].add(str(link.conversation.pk))
    by_use = sorted(tagged, key=lambda name: (len(tagged[name]), name))
    used = [name for name in by_use if tagged[name]] or by_use
    filed: dict[Any, set[str]] = {folder.pk: set() for folder in folders}
    for c in conversations:
        if c.folder is not None:
            filed[c.folder.pk].add(str(c.pk))
    big_folder = max(filed, key=lambda pk: len(filed[pk]))
    return Sidebar(
        owner=owner,
        pinned={str(conversations[n].pk) for n in pinned},
        common_tag=used[-1],
        rare_tag=used[0],
        tagged=tagged,
        big_folder=str(big_folder),
        foldered=filed[big_folder],
    )


def ids_in(response: Any) -> list[str]:
    assert response.status_code == 200, (response.status_code, response.content[:300])
    return [item["id"] for item in response.json()["results"]]


def checked(url: str, client: Client, check: Callable[[list[str]], bool]) -> str:
    """`url`, once its answer has passed `check`: a filter that filters nothing, or an
    order that is not pinned first, would be timed for nothing."""
    ids = ids_in(client.get(url))
    if not check(ids):
        raise SystemExit(f"{url} answered what it should not: {ids[:5]}…")
    return url


def requests(sidebar: Sidebar, client: Client) -> dict[str, str]:
    """Each request's name and URL, checked."""
    first = min(PAGE, len(sidebar.pinned))

    def pinned_first(ids: list[str]) -> bool:
        return set(ids[:first]) <= sidebar.pinned and not set(ids[first:]) & sidebar.pinned

    def only(wanted: set[str]) -> Callable[[list[str]], bool]:
        return lambda ids: set(ids) <= wanted and len(ids) == min(PAGE, len(wanted))

    tag = f"{LIST}&tag="
    return {
        "first page": checked(LIST, client, pinned_first),
        "tag, the most used": checked(
            tag + sidebar.common_tag, client, only(sidebar.tagged[sidebar.common_tag])
        ),
        "tag, the least used": checked(
            tag + sidebar.rare_tag, client, only(sidebar.tagged[sidebar.rare_tag])
        ),
        "folder, the biggest": checked(
            f"{LIST}&folder={sidebar.big_folder}", client, only(sidebar.foldered)
        ),
        "GET tags/": "/api/v1/tags/",
        "GET folders/": "/api/v1/folders/",
    }


def report(
    results: dict[str, dict[str, Timing]], details: dict[str, str], args: argparse.Namespace
) -> bool:
    print(
        f"bench.organising on {database_label()}, {host_label()}, "
        f"samples={args.samples}: {args.large.label()} vs {args.small.label()}\n"
    )
    print(
        "| request | rows large/small | p50 ms small | p50 ms large | p99 ms large | ratio "
        "| queries small/large | target | met |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---|---|")
    met_all = True
    for name, timing in results.items():
        small, large = timing["small"], timing["large"]
        ratio = large.median / small.median
        targeted = not name.startswith("GET ")
        met = large.median <= TARGET_MS and ratio <= TARGET_RATIO
        met_all &= met or not targeted
        target = f"≤ {TARGET_MS:g} ms, ≤ {TARGET_RATIO}x" if targeted else "(information)"
        verdict = ("PASS" if met else "FAIL") if targeted else ""
        print(
            f"| {name} | {details[name]} | {small.median:.2f} | {large.median:.2f} "
            f"| {large.p99:.2f} | {ratio:.2f}x | {small.queries}/{large.queries} "
            f"| {target} | {verdict} |"
        )
    return met_all


def rows_matched(sidebar: Sidebar, name: str) -> int:
    if name.startswith("tag, the most"):
        return len(sidebar.tagged[sidebar.common_tag])
    if name.startswith("tag, the least"):
        return len(sidebar.tagged[sidebar.rare_tag])
    if name.startswith("folder"):
        return len(sidebar.foldered)
    if name == "GET tags/":
        return len(sidebar.tagged)
    if name == "GET folders/":
        return Folder.objects.filter(owner=sidebar.owner).count()
    return Conversation.objects.filter(owner=sidebar.owner).count()


def main() -> int:
    args = parse_args()
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(f"stopped by signal {signum}"))
    if database_refused("organising", args.allow_sqlite):
        return 2
    call_command("migrate", interactive=False, verbosity=0)
    redis_url, redis_stop = redis_start()
    owners: list[User] = []
    sidebars: dict[str, Sidebar] = {}
    try:
        rng = Random(20261206)
        for size_name in ("small", "large"):
            owner = User.objects.create_user(username=f"bench-organising-{secrets.token_hex(4)}")
            owners.append(owner)
            sidebars[size_name] = sidebar_build(owner, getattr(args, size_name), rng)
        analyze(Conversation, Branch, Message, Folder, Tag, ConversationTag)
        with requests_unthrottled(redis_url):
            clients = {size: Client(HTTP_HOST="localhost") for size in sidebars}
            for size, client in clients.items():
                client.force_login(sidebars[size].owner)
            urls = {size: requests(sidebars[size], clients[size]) for size in sidebars}
            results: dict[str, dict[str, Timing]] = {}
            details: dict[str, str] = {}
            for name in urls["large"]:
                progress(f"timing {name}…")
                calls = {size: getter(clients[size], urls[size][name]) for size in sidebars}
                results[name] = alternating_timed(calls, args.samples)
                counts = [rows_matched(sidebars[size], name) for size in ("large", "small")]
                details[name] = "/".join(f"{count:,}" for count in counts)
        met = report(results, details, args)
        print(
            f"\nevery sidebar request ≤ {TARGET_MS:g} ms and within {TARGET_RATIO}x of the "
            f"small user: {'PASS' if met else 'FAIL'}"
        )
    finally:
        for owner in owners:
            owner_delete(owner)
        redis_stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
