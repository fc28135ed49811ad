"""Every benchmark of bench/ runs at toy size, so that none silently rots: run as people
run it (`python -m bench.<name> <toy size>`), it exits 0, prints its table with measured
numbers in it, leaves its database holding the rows it held before, and leaves no
temporary file behind.

Where each one writes: a database of its own, copied from the test database pytest-django
made and migrated for this session (on SQLite a file copied through SQLite's backup API,
on PostgreSQL `CREATE DATABASE ... TEMPLATE`), given to it as DATABASE_URL; on SQLite it
also gets --allow-sqlite. So the same test runs on SQLite (`make test` locally) and on
PostgreSQL (CI), and a benchmark that forgets to clean up fails here however the others
behave. Redis is an embedded Valkey of its own (REDIS_URL). See tests/bench/harness.py.

Benchmarks that start process stacks (workers, Daphne, the fake upstream) are marked slow.
Most of a benchmark's time is spent waiting (paced replies, leases, process start-up), so
the selected ones start a few at a time as soon as the first test here asks for a result,
and each test waits for its own.
"""

import os
import re
import sys
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.bench.harness import Bench, Outcome, bench_run, template_drop, template_make

PARALLEL = max(3, os.cpu_count() or 1)
NUM = r"[\d.]+"

BENCHES = [
    pytest.param(bench, id=name, marks=[pytest.mark.slow] if slow else [])
    for name, slow, bench in [
        ("chaos", True, Bench(
            "chaos", ("--trials", "1", "--seed", "1"), "trial ",
            (rf"\s+1\s+1\s+\d+\s+(before start|mid-stream|in tool|between steps|after end)"
             rf"\s+{NUM}\s+PASS$",),
        )),
        ("resume", True, Bench(
            "resume", ("--trials", "2", "--seed", "1", "--tokens", "40"), "| trial | seed |",
            (r"\| 1 \| 2 \| \d+ \| \d+ \| \d+ \| \d+ \| ok \|",),
        )),
        ("fanout", True, Bench(
            "fanout", ("--clients", "3", "--tokens", "10", "--tokens-per-second", "100",
                       "--probes", "1", "--pause", "0.2"),
            "| metric | value |",
            (r"\| runs completed and checked \| 3 / 3 \|",
             rf"\| delivery latency p50 ms \| {NUM} \|",
             rf"\| memory per open socket KiB \| -?{NUM} \|"),
        )),
        ("openai_api", True, Bench(
            "openai_api", ("--clients", "2", "--rounds", "1", "--tokens", "10",
                           "--tokens-per-second", "100"),
            "| measure | value |",
            (rf"\| first token p50, /openai/v1/ over /api/v1/ \| {NUM}x \|",),
        )),
        ("burst_chat", True, Bench(
            "burst", ("--scenario", "chat", "--sizes", "10,20", "--calls", "2"),
            "| messages | calls |",
            (rf"\| 10 \| 2 \| {NUM} \| {NUM} \| <= 25 \| (PASS|FAIL) \| {NUM} \| {NUM} "
             rf"\| {NUM} / {NUM} \|",),
        )),
        ("burst", True, Bench(
            "burst", ("--scenario", "burst", "--clients", "3", "--tokens", "10",
                      "--tokens-per-second", "100", "--timeout", "60"),
            "| measure | value |",
            (r"\| replies completed \| 3 / 3 \|",
             r"\| lost / duplicated events, streamed text != stored \| 0 / 0 / 0 \|",
             r"\| time to first token p50 ms \| \d+ \|"),
        )),
        ("faults", True, Bench(
            "faults", ("--redis", "0", "--database", "0", "--upstream", "1"),
            "| fault | trials |",
            (r"\| stall \| 1 \| failed: provider_timeout 3 \| 0 \| 0 \|",
             r"\| cut \| 1 \| failed: connection_error 3 \| 0 \| 0 \|",
             r"\| garbage \| 1 \| failed: provider_error 3 \| 0 \| 0 \|"),
        )),
        ("stream", True, Bench(
            "stream", ("--concurrency", "1", "--rounds", "1", "--tokens", "20",
                       "--tokens-per-second", "200", "--first-token-delay", "0",
                       "--arrival", "burst"),
            "| coalesce ms | runs |",
            (rf"\| default \(\d+\) \| 1 \| burst \| {NUM} \| {NUM} \| {NUM} \| {NUM} \|",),
        )),
        ("admin", False, Bench(
            "admin", ("--users", "5", "--conversations", "40", "--long", "2",
                      "--long-messages", "30", "--repeats", "2"),
            "| page | p50 ms |",
            (rf"\| changelist, search title word \| {NUM} \| {NUM} \|",
             rf"\| transcript page 1 \(30 msgs\) \| {NUM} \| {NUM} \|"),
        )),
        ("step_cost", False, Bench(
            "step_cost", ("--sizes", "10", "--steps", "2", "--warm-up", "1"),
            "| measure | value |",
            (rf"\| CPU per step, 10 messages \(median / p90\) \| {NUM} / {NUM} ms \|",),
        )),
        ("run_cost", False, Bench(
            "run_cost", ("--sizes", "10", "--calls", "2", "--warm-up", "1"),
            "| path | messages |",
            # One channel-layer send per message.create, whatever the path.
            (rf"\| socket message\.create \| 10 \| {NUM} \| {NUM} \| {NUM} \| \d+ \| \d+ \| 1 \|",
             rf"\| POST chat/ \| 10 \| {NUM} \| {NUM} \| {NUM} \| \d+ \| \d+ \| 1 \|"),
        )),
        ("api", False, Bench(
            "api", ("--conversations", "60", "--total", "600", "--big", "300", "--samples", "2"),
            "| request | data |",
            (rf"\| GET messages \(200, random depth\) \| conversation of 300 messages "
             rf"\| {NUM} \| {NUM} \|",
             rf"\| GET search \(common word\) \| \d+ matching of 600 \| {NUM} \| {NUM} \|"),
        )),
        ("organising", False, Bench(
            "organising", ("--small", "20,2,4,2", "--large", "60,3,8,6", "--samples", "2"),
            "| request | rows large/small |",
            # Every filter checked before it is timed; the ratio to the small user measured.
            (rf"\| first page \| 60/20 \| {NUM} \| {NUM} \| {NUM} \| {NUM}x \| \d+/\d+ \|",
             rf"\| tag, the most used \| \d+/\d+ \| {NUM} \| {NUM} \| {NUM} \| {NUM}x \|",
             rf"\| folder, the biggest \| \d+/\d+ \| {NUM} \| {NUM} \| {NUM} \| {NUM}x \|",
             rf"\| GET tags/ \| 8/4 \| {NUM} \| {NUM} \| {NUM} \| {NUM}x \|"),
        )),
        ("shared_page", False, Bench(
            "shared_page", ("--messages", "10,40", "--samples", "2"),
            "| request | messages |",
            # The page and its JSON, each with its size and statements, at both lengths.
            tuple(
                rf"\| GET {door} \| {size} \| {NUM} \| {NUM} \| {NUM} \| \d+ \|{target}$"
                for door in ("/s/<token>/", "shared/<token>/")
                for size, target in (("10", r" +\| +\|"), ("40", r" ≤ 100 ms \| (PASS|FAIL) \|"))
            ),
        )),
        ("branches", False, Bench(
            "branches", ("--length", "200", "--branches", "4", "--repeats", "2"),
            "| operation | median ms small |",
            # An edit costs the same statements on the long branched path as on a short one.
            (rf"\| edit \| {NUM} \| {NUM} \| {NUM}x \| (\d+)/\1 \|",),
        )),
        ("state", False, Bench(
            "state", ("--sizes", "10,20", "--repeats", "2"),
            "| messages | append median ms |",
            (rf"\| 20 \| {NUM} \| {NUM} \| \d+ \| {NUM} \| {NUM} \| \d+ \| 21 \|",),
        )),
        ("sql_paths", False, Bench(
            "sql_paths", ("--repeats", "3", "--warm-up", "1"),
            "| path | raw median ms |",
            (rf"\| step: take the lease \| {NUM} \| {NUM} \| -?{NUM} \| 1 \| \d+ / \d+ \| "
             rf"(keep raw|ORM) \|",),
        )),
        ("files", False, Bench(
            "files", ("--size-mib", "1", "--repeats", "2"),
            "| file | size MiB |",
            (rf"\| png \| {NUM} \| {NUM} \| {NUM} \| {NUM} \| {NUM}x \| {NUM}x \| {NUM} "
             rf"\| (PASS|FAIL) \|",),
        )),
        ("attachments", False, Bench(
            "attachments", ("--repeats", "2", "--image-kib", "4"),
            "| model input, 20 images |",
            (rf"\| sent as image parts \| 20 \| 20 \| {NUM} \| {NUM} \|",
             rf"\| described in words \| 0 \| 0 \| {NUM} \| {NUM} \|"),
        )),
        ("stateless", False, Bench(
            "stateless", ("--repeats", "2", "--bombs", "16,32"),
            "| state | state size KiB |",
            (rf"\| bomb inflating to 32 MiB \| [\d,]+ \| too_large \| {NUM} \|",),
            sqlite=False,
        )),
        ("import_shapes", False, Bench(
            "import_shapes", ("--scale", "0.002"),
            "| shape | format |",
            # Imported, exported both ways, paged, listed and switched: every cell measured.
            tuple(
                rf"\| {shape} \| {kind} \| {NUM} \| [\d,]+ \| [\d,]+ \| [\d,]+ \| {NUM} "
                rf"\| [\d,]+ \| {NUM} \| {NUM} \| {NUM} \| {NUM} \| {NUM} \| {NUM} "
                rf"\| ({NUM}|-) \| imported \|"
                for shape, kind in (("one timestamp", "chatgpt"), ("staircase", "parley"),
                                    ("open calls", "parley"))
            ),
        )),
    ]
]  # fmt: skip


@pytest.fixture(scope="module")
def outcome(
    request, django_db_setup, django_db_blocker, tmp_path_factory
) -> Iterator[Callable[[Bench], Outcome]]:
    """The outcome of a benchmark: every benchmark this session selected starts at once,
    PARALLEL at a time, each on its own copy of the test database."""
    chosen = [
        item.callspec.params["bench"]
        for item in request.session.items
        if item.module is sys.modules[__name__] and hasattr(item, "callspec")
    ]
    workdir = tmp_path_factory.mktemp("bench")
    with django_db_blocker.unblock():
        template = template_make()
    pool = ThreadPoolExecutor(max_workers=PARALLEL, thread_name_prefix="bench")
    runs = {
        bench.name: pool.submit(bench_run, bench, f"b{number}", template, workdir)
        for number, bench in enumerate(chosen)
    }
    yield lambda bench: runs[bench.name].result()
    pool.shutdown(wait=True, cancel_futures=True)  # those not started when a test stops all
    template_drop(template)


@pytest.mark.parametrize("bench", BENCHES)
def test_a_benchmark_at_toy_size_prints_its_table_and_cleans_up(bench: Bench, outcome) -> None:
    ran = outcome(bench)
    assert ran.returncode == 0, ran.tail()
    rows = ran.table(bench.header)
    assert rows, f"no table headed {bench.header!r}\n{ran.tail()}"
    for pattern in bench.rows:
        assert any(re.match(pattern, row) for row in rows), (pattern, "\n".join(rows))
    assert ran.rows_after == ran.rows_before, "the benchmark left rows behind"
    assert ran.files_left == [], "the benchmark left temporary files behind"
