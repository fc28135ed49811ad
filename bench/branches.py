"""Branches benchmark: do edits, regenerations, switches, the model input and message
pages cost the same on a 100,000-message path across 50 branches as on 10 messages?

Builds, for a throwaway `bench-*` user, with bulk inserts
(bench/branch_tree.py): a conversation whose active path of 100,000 messages crosses 50
chained branches (each forked from the previous one's path as an edit does, the old turn
left on its branch; the last branches short, so the tail crosses several fork points; a
sibling reply at every user message of a window around the tenth fork point),
and a conversation whose path of 10 messages crosses 2 branches. Then it times, warming
each operation up once (its queries counted then) and alternating the sizes in every
round (small first, then large first) so a noisy machine's drift hits both alike:

- regenerate: `engine.reply_regenerate` of the path's last assistant reply;
- edit: `engine.message_edit` of the path's last user message;
- switch: `services.branch_switch` between the leaf and its parent, back and forth;
- model input: `selectors.conversation_model_input` on the leaf, with the history tail
  capped at 10 messages (both conversations send the same amount) and with the default;
- pages: `selectors.message_rows_page` of 10 (all the small conversation holds, so both
  sizes do the same work), the last one and one across the deep fork point; and, without
  a target since they return twenty times the rows, of 200: the first, the last, and the
  one across the deep fork point, 64 of whose messages have alternatives. Its query count
  must equal the small page's, before and after the timed calls add ~120 branches.

Regenerate and edit run their after-commit work for real (the run announced on the event
log in Redis, its first step sent to the broker, the notifications): REDIS_URL must name
a running Redis. Each run they start is ended through the ORM before the next call, and
the queued steps are taken off the broker at the end. Everything is deleted at the end,
also on error or when stopped. It measures PostgreSQL (DATABASE_URL); SQLite only with
--allow-sqlite.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/parley_bench \\
        REDIS_URL=redis://127.0.0.1:6379/0 .venv/bin/python -m bench.branches
"""

import argparse
import itertools
import os
import secrets
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from random import Random
from typing import Any

from bench.common import (
    Timing,
    analyze,
    database_label,
    database_refused,
    django_setup,
    owner_delete,
    progress,
)

django_setup("config.settings.local")

from django.conf import settings  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402
from django.test.utils import CaptureQueriesContext, override_settings  # noqa: E402
from django.utils import timezone  # noqa: E402

from accounts.models import User  # noqa: E402
from bench.branch_tree import PAGE, Tree, tree_build  # noqa: E402
from conversations import engine, selectors, services  # noqa: E402
from conversations.engine import eventlog  # noqa: E402
from conversations.models import Branch, Conversation, Message, Run  # noqa: E402

TARGET_RATIO = 1.5
SIZES = {"small": (10, 2), "large": (100_000, 50)}  # path length, branches on the path
DEEP_FORK = 9  # the fork point (index) whose window of siblings the deep page reads
SMALL_PAGE = 10  # the page the small conversation fills: equal work at both sizes
PAGES = (", the first", ", the last", " across a deep fork")
UNEQUAL_PAGE = f"no target: 10 vs {PAGE} messages returned"


@dataclass(frozen=True)
class Operation:
    name: str
    calls: dict[str, Callable[[], Any]]  # size -> the timed call
    note: str = ""  # why it has no target (unequal work at the two sizes), or ""
    settle: Callable[[Any], None] | None = None  # untimed, after every call


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=30, help="timed calls per size")
    parser.add_argument("--length", type=int, default=SIZES["large"][0], help="the long path")
    parser.add_argument("--branches", type=int, default=SIZES["large"][1], help="on that path")
    parser.add_argument("--allow-sqlite", action="store_true", help="run on a non-PostgreSQL DB")
    return parser.parse_args()


def measure(operation: Operation, repeats: int) -> dict[str, Timing]:
    timings = {size: Timing() for size in operation.calls}
    for size, call in operation.calls.items():
        with CaptureQueriesContext(connection) as captured:
            result = call()
        timings[size].queries = len(captured)
        if operation.settle:
            operation.settle(result)
    for round_ in range(repeats):
        order = list(operation.calls) if round_ % 2 == 0 else list(reversed(operation.calls))
        for size in order:
            started = time.perf_counter()
            result = operation.calls[size]()
            timings[size].samples_ms.append((time.perf_counter() - started) * 1000)
            if operation.settle:
                operation.settle(result)
    return timings


class RunEnder:
    """Ends each run an edit or a regeneration starts, as its worker would, so the next
    call is not refused (one active run per conversation); remembers their ids."""

    def __init__(self) -> None:
        self.run_ids: list[str] = []

    def __call__(self, result: tuple[Any, ...]) -> None:
        run = result[-1]
        assert isinstance(run, Run)
        now = timezone.now()
        Run.objects.filter(pk=run.pk).update(
            status=Run.Status.CANCELLED, finished_at=now, updated_at=now
        )
        self.run_ids.append(str(run.pk))


def switcher(tree: Tree) -> Callable[[], Branch]:
    targets = itertools.cycle([tree.other.pk, tree.leaf.pk])
    return lambda: services.branch_switch(conversation=tree.conversation, branch_id=next(targets))


def operations(trees: dict[str, Tree], ender: RunEnder) -> list[Operation]:
    def each(make: Callable[[Tree], Callable[[], Any]]) -> dict[str, Callable[[], Any]]:
        return {size: make(tree) for size, tree in trees.items()}

    def page(limit: int, where: str) -> Callable[[Tree], Callable[[], Any]]:
        """A page of `limit`: the path's first, its last, or one centred on the deep fork."""

        def after(t: Tree) -> int:
            if where == "deep" and t.boundary_after:
                return t.boundary_after + PAGE // 2 - limit // 2
            if where == "last":
                return max(0, t.leaf.message_count - limit)
            return 0

        return lambda t: partial(
            selectors.message_rows_page,
            conversation=t.conversation,
            after=after(t),
            limit=limit,
            branch=t.leaf,
        )

    def model_input(t: Tree) -> Callable[[], Any]:
        return partial(
            selectors.conversation_model_input, conversation=t.conversation, branch=t.leaf
        )

    def capped(t: Tree) -> Callable[[], Any]:
        def call() -> Any:
            with override_settings(PARLEY_CONTEXT_MAX_MESSAGES=SIZES["small"][0]):
                return model_input(t)()

        return call

    return [
        Operation(f"message page of {SMALL_PAGE}, the last", each(page(SMALL_PAGE, "last"))),
        Operation(
            f"message page of {SMALL_PAGE} across a deep fork", each(page(SMALL_PAGE, "deep"))
        ),
        Operation(f"message page of {PAGE}, the first", each(page(PAGE, "first")), UNEQUAL_PAGE),
        Operation(f"message page of {PAGE}, the last", each(page(PAGE, "last")), UNEQUAL_PAGE),
        Operation(
            f"message page of {PAGE} across a deep fork", each(page(PAGE, "deep")), UNEQUAL_PAGE
        ),
        Operation("model input, tail 10", each(capped)),
        Operation(
            f"model input, default tail ({settings.PARLEY_CONTEXT_MAX_MESSAGES})",
            each(model_input),
            f"no target: 10 vs {settings.PARLEY_CONTEXT_MAX_MESSAGES} messages read",
        ),
        Operation("switch", each(switcher)),
        Operation(
            "regenerate",
            each(
                lambda t: partial(
                    engine.reply_regenerate,
                    conversation=t.conversation,
                    message_id=t.last_assistant,
                )
            ),
            settle=ender,
        ),
        Operation(
            "edit",
            each(
                lambda t: partial(
                    engine.message_edit,
                    conversation=t.conversation,
                    message_id=t.last_user,
                    content="Same question, but answer it for the second quarter instead.",
                )
            ),
            settle=ender,
        ),
    ]


def deep_page_queries(tree: Tree) -> tuple[int, int, int]:
    """(queries, messages, messages with alternatives) of the page across the deep fork."""
    conversation = Conversation.objects.get(pk=tree.conversation.pk)
    with CaptureQueriesContext(connection) as captured:
        page = selectors.message_rows_page(
            conversation=conversation, after=tree.boundary_after, limit=PAGE, branch=tree.leaf
        )
    with_choices = sum(1 for row in page.items if row["alternatives"])
    return len(captured), len(page.items), with_choices


def broker_keys() -> set[str]:
    """The broker's bookkeeping keys (kombu's queue bindings), made by the first send."""
    keys = eventlog.redis_client().keys("_kombu.binding*")
    return {key.decode() if isinstance(key, bytes) else str(key) for key in keys}


def queued_steps_drop(run_ids: list[str], keys_before: set[str]) -> int:
    """Take the steps these runs queued off the broker: no worker should start them. The
    bindings the first send made go too, if there were none before."""
    client = eventlog.redis_client()
    made = broker_keys() - keys_before
    if made:
        client.delete(*made)
    queue = settings.CELERY_TASK_DEFAULT_QUEUE
    dropped = 0
    wanted = set(run_ids)
    for entry in client.lrange(queue, 0, -1):
        text = entry.decode() if isinstance(entry, bytes) else str(entry)
        if any(run_id in text for run_id in wanted):
            dropped += int(client.lrem(queue, 0, text))
    return dropped


def report(results: dict[str, dict[str, Timing]], notes: dict[str, str], repeats: int) -> list[str]:
    length, chain = SIZES["large"]
    print(
        f"bench.branches on {database_label()}, {os.cpu_count()} CPUs, repeats={repeats}: "
        f"{length:,} messages on a path across {chain} branches vs {SIZES['small'][0]} "
        f"across {SIZES['small'][1]}\n"
    )
    print(
        "| operation | median ms small | median ms large | ratio | queries small/large "
        "| target met |"
    )
    print("|---|---:|---:|---:|---:|---|")
    missed = []
    for name, timing in results.items():
        small, large = timing["small"], timing["large"]
        ratio = large.median / small.median
        if not notes[name]:
            met = ratio <= TARGET_RATIO and large.queries == small.queries
            verdict = "yes" if met else "NO"
            if not met:
                missed.append(name)
        else:
            verdict = f"({notes[name]})"
        print(
            f"| {name} | {small.median:.2f} | {large.median:.2f} | {ratio:.2f}x "
            f"| {small.queries}/{large.queries} | {verdict} |"
        )
    return missed


def main() -> int:
    args = parse_args()
    SIZES["large"] = (args.length, args.branches)
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(f"stopped by signal {signum}"))
    if database_refused("branches", args.allow_sqlite):
        return 2
    try:
        eventlog.redis_client().ping()
    except Exception as exc:
        progress(f"bench.branches needs the Redis in REDIS_URL ({settings.REDIS_URL}): {exc}")
        return 2
    call_command("migrate", interactive=False, verbosity=0)
    owner = User.objects.create_user(username=f"bench-branches-{secrets.token_hex(4)}")
    ender = RunEnder()
    keys_before = broker_keys()
    try:
        rng = Random(20261125)
        trees: dict[str, Tree] = {}
        for size, (length, chain) in SIZES.items():
            progress(f"building {length:,} messages on {chain} branches…")
            deep = min(DEEP_FORK, chain - 2) if chain > 2 else None
            trees[size] = tree_build(owner, length=length, chain=chain, rng=rng, deep_fork=deep)
        analyze(Conversation, Branch, Message, Run)
        before = {size: deep_page_queries(tree) for size, tree in trees.items()}
        results: dict[str, dict[str, Timing]] = {}
        notes: dict[str, str] = {}
        for operation in operations(trees, ender):
            progress(f"timing {operation.name}…")
            results[operation.name] = measure(operation, args.repeats)
            notes[operation.name] = operation.note
        missed = report(results, notes, args.repeats)
        after = deep_page_queries(trees["large"])
        branches = Branch.objects.filter(conversation=trees["large"].conversation).count()
        (q_small, n_small, alt_small), (q_large, n_large, alt_large) = (
            before["small"],
            before["large"],
        )
        print(
            f"\nalternatives: a page of {n_large} messages, {alt_large} with alternatives: "
            f"{q_large} queries ({n_small} messages, {alt_small} with alternatives: {q_small}); "
            f"again after the timed calls, with {branches} branches: {after[0]} queries"
        )
        pages = {key: results[f"message page of {PAGE}{key}"]["large"].median for key in PAGES}
        print(
            f"{PAGE}-message pages of the long path against its first (one branch, no "
            f"alternatives): the last {pages[', the last'] / pages[', the first']:.2f}x, across "
            f"the deep fork {pages[' across a deep fork'] / pages[', the first']:.2f}x"
        )
        met = q_large == q_small == after[0]
        print(f"alternatives cost no query per message: {'PASS' if met else 'FAIL'}")
        print(
            f"every operation within {TARGET_RATIO}x of the small conversation: "
            + ("PASS" if not missed else f"FAIL ({', '.join(missed)})")
        )
    finally:
        dropped = queued_steps_drop(ender.run_ids, keys_before)
        messages = Message.objects.filter(conversation__owner=owner).count()
        owner_delete(owner)
        progress(f"dropped {dropped} queued steps; deleted {messages:,} messages")
    return 0


if __name__ == "__main__":
    sys.exit(main())
