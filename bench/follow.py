"""Follow benchmark: the CPU a web process spends following many run logs at once.

In one event loop (as in one Daphne), `--followers` readers follow as many run logs live,
while a writer in another process appends to every log `--events` deltas at
`--rate` a second (one XADD after another, as the worker's appends arrive), then ends
them. Two ways of following, one after the other, alternating `--rounds` times:

- `hub`: `eventlog.reader.events_follow` (under every door's `run_follow`), which serves
  every follower of a loop from one blocking XREAD over all the followed logs
  (conversations/engine/eventlog/hub.py);
- `own`: each follower blocks in its own XREAD on its log (how followers read before),
  written here with the same cursor.

Reported: the followers' process CPU (`time.process_time`, everything but the writer) per
event received, the cores it used, and every event received exactly once. Sending the
events on to websockets is left out: it costs the same either way. Redis is REDIS_URL's.

    REDIS_URL=redis://127.0.0.1:6379/0 .venv/bin/python -m bench.follow \\
        [--followers 500 --events 30 --rate 10 --rounds 3]
"""

import argparse
import asyncio
import json
import statistics
import sys
import time
import uuid

from bench.common import django_setup, progress

django_setup("config.settings.local")

import redis  # noqa: E402
from django.conf import settings  # noqa: E402

from conversations.engine.eventlog import stream_key  # noqa: E402
from conversations.engine.eventlog.connections import async_client  # noqa: E402
from conversations.engine.eventlog.reader import (  # noqa: E402
    _Cursor,
    _xread_entries,
    events_follow,
)

WRITER = """
import json, sys, time
from bench.common import django_setup
django_setup("config.settings.local")
from conversations.engine.eventlog import (
    MESSAGE_CREATED, RUN_COMPLETED, RUN_CREATED, EventWriter,
)
ids, events, rate = json.loads(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
writers = [EventWriter(run_id, coalesce_ms=0) for run_id in ids]
for writer in writers:
    writer.emit(RUN_CREATED)
    writer.emit(MESSAGE_CREATED, message_id="m")
for _ in range(events):
    began = time.monotonic()
    for writer in writers:
        writer.message_delta("m", "token ")
    time.sleep(max(0.0, 1 / rate - (time.monotonic() - began)))
for writer in writers:
    writer.emit(RUN_COMPLETED)
"""


async def follow_hub(run_id: str) -> list[int]:
    return [event["sequence_number"] async for event in events_follow(run_id, timeout=120)]


async def follow_own(run_id: str) -> list[int]:
    cursor = _Cursor.start(None, 5000, 120)
    key = stream_key(run_id)
    client = async_client()
    received: list[int] = []
    while not cursor.done and (wait := cursor.wait_ms()):
        response = await client.xread({key: cursor.last_id}, count=500, block=wait)
        received += [event["sequence_number"] for event in cursor.take(_xread_entries(response))]
    return received


async def measure(mode: str, args: argparse.Namespace) -> tuple[float, float, bool]:
    """CPU per event (µs), cores used, and whether every follower got every event once."""
    ids = [str(uuid.uuid4()) for _ in range(args.followers)]
    follow = follow_hub if mode == "hub" else follow_own
    readers = [asyncio.create_task(follow(run_id)) for run_id in ids]
    await asyncio.sleep(0.5)  # all following before the first event
    cpu, wall = time.process_time(), time.monotonic()
    writer = await asyncio.create_subprocess_exec(
        sys.executable, "-c", WRITER, json.dumps(ids), str(args.events), str(args.rate)
    )
    received = await asyncio.gather(*readers)
    await writer.wait()
    cpu, wall = time.process_time() - cpu, time.monotonic() - wall
    expected = list(range(args.events + 3))
    exact = all(sequences == expected for sequences in received)
    total = sum(len(sequences) for sequences in received)
    redis.Redis.from_url(settings.REDIS_URL).delete(*[stream_key(run_id) for run_id in ids])
    return cpu / max(total, 1) * 1e6, cpu / wall, exact


async def main(args: argparse.Namespace) -> None:
    results: dict[str, list[tuple[float, float, bool]]] = {"hub": [], "own": []}
    for round_ in range(args.rounds):
        for mode in ("hub", "own"):
            progress(f"round {round_ + 1}/{args.rounds}: {mode}")
            results[mode].append(await measure(mode, args))
    print(
        f"bench.follow: {args.followers} followers in one event loop, {args.events} deltas "
        f"each at {args.rate:g}/s, {args.rounds} rounds\n"
    )
    print("| following | CPU µs per event (median) | all rounds | cores used | every event once |")
    print("|---|---:|---|---:|---|")
    for mode, label in (("hub", "one shared read (hub)"), ("own", "a read per follower")):
        per_event = [round(r[0]) for r in results[mode]]
        cores = statistics.median(r[1] for r in results[mode])
        exact = "yes" if all(r[2] for r in results[mode]) else "NO"
        print(
            f"| {label} | {statistics.median(per_event):.0f} | {per_event} | {cores:.2f} "
            f"| {exact} |"
        )


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--followers", type=int, default=500)
    parser.add_argument("--events", type=int, default=30, help="deltas per log")
    parser.add_argument("--rate", type=float, default=10.0, help="deltas per second per log")
    parser.add_argument("--rounds", type=int, default=3)
    return parser.parse_args()


if __name__ == "__main__":
    asyncio.run(main(parse_args()))
