"""`bench.openai_api`: a streamed response through `/openai/v1/responses` against the same
reply through `/api/v1/` (issue 20's target: the OpenAI-compatible door costs at most
1.2x, in time to first token and in total, 50 concurrent), measured in one run.

The worker, beat and one Daphne are started as the Procfile starts them (bench/procfile.py),
with the fake upstream in its own process answering `--tokens` tokens at
`--tokens-per-second`. Each round sends `--clients` requests at the same moment through
one door, each in a conversation of its own (one reply runs at a time per conversation):

- `/openai/v1/`: `POST /responses` with `stream: true` and the conversation's id, read to
  `response.completed`; first token = the first `response.output_text.delta`;
- `/api/v1/`: `POST conversations/<id>/messages/`, then `GET runs/<id>/events/` (SSE) read
  to `run.completed`; first token = the first `message.delta`.

Times run from sending the request to receiving that event. After a warm-up round per
door, `--rounds` rounds per door alternate, so both doors see the same conditions.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/parley_bench \\
        .venv/bin/python -m bench.openai_api [--clients 50 --rounds 3]
"""

from bench.common import django_setup

django_setup("config.settings.local")

import argparse  # noqa: E402
import asyncio  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import time  # noqa: E402
from collections.abc import AsyncIterator  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from typing import Any  # noqa: E402

import httpx2 as httpx  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402

from bench.common import Row, database_refused, pct, progress, table_print  # noqa: E402
from bench.procfile import procfile_stack  # noqa: E402
from bench.resume import Stack, common_arguments  # noqa: E402

TARGET_RATIO = 1.2
TIMEOUT = 120.0


@dataclass
class Sample:
    first_token: float  # seconds from the request sent
    total: float


async def _sse_events(answer: httpx.Response) -> AsyncIterator[dict[str, Any]]:
    async for line in answer.aiter_lines():
        if line == "data: [DONE]":
            return  # the stream is over
        if line.startswith("data: "):
            yield json.loads(line[6:])


async def openai_door(http: httpx.AsyncClient, key: str, conversation: str) -> Sample:
    sent = time.perf_counter()
    first = None
    body = {"model": "bench", "input": "Tell me a story.", "conversation": conversation}
    headers = {"Authorization": f"Bearer {key}"}
    async with http.stream(
        "POST", "/openai/v1/responses", json={**body, "stream": True}, headers=headers
    ) as answer:
        assert answer.status_code == 200, await answer.aread()
        async for event in _sse_events(answer):
            if first is None and event["type"] == "response.output_text.delta":
                first = time.perf_counter() - sent
            if event["type"] == "response.completed":
                break
    assert first is not None, "no text streamed"
    return Sample(first, time.perf_counter() - sent)


async def rest_door(http: httpx.AsyncClient, key: str, conversation: str) -> Sample:
    sent = time.perf_counter()
    first = None
    headers = {"Authorization": f"Bearer {key}"}
    created = await http.post(
        f"/api/v1/conversations/{conversation}/messages/",
        json={"content": "Tell me a story."},
        headers=headers,
    )
    assert created.status_code == 202, created.text
    run_id = created.json()["run"]["id"]
    async with http.stream("GET", f"/api/v1/runs/{run_id}/events/", headers=headers) as answer:
        assert answer.status_code == 200, await answer.aread()
        async for event in _sse_events(answer):
            if first is None and event["type"] == "message.delta":
                first = time.perf_counter() - sent
            if event["type"] == "run.completed":
                break
    assert first is not None, "no text streamed"
    return Sample(first, time.perf_counter() - sent)


async def round_run(stack: Stack, door: str, conversations: list[str]) -> list[Sample]:
    clients = len(conversations)
    call = openai_door if door == "openai" else rest_door
    limits = httpx.Limits(max_connections=clients * 2, max_keepalive_connections=clients * 2)
    base = f"http://127.0.0.1:{stack.webs[0].port}"
    async with httpx.AsyncClient(base_url=base, timeout=TIMEOUT, limits=limits) as http:
        return list(await asyncio.gather(*(call(http, stack.key, c) for c in conversations)))


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms"


def report(samples: dict[str, list[Sample]]) -> None:
    rows: list[Row] = []
    for door, label in (("rest", "/api/v1/"), ("openai", "/openai/v1/responses")):
        firsts = [s.first_token for s in samples[door]]
        totals = [s.total for s in samples[door]]
        rows.append((f"{label} first token p50 / p90", f"{_ms(pct(firsts, 50))} / "
                     f"{_ms(pct(firsts, 90))}", "", None))  # fmt: skip
        rows.append((f"{label} total p50 / p90", f"{_ms(pct(totals, 50))} / "
                     f"{_ms(pct(totals, 90))}", "", None))  # fmt: skip
    for measure, pick in (("first token", "first_token"), ("total", "total")):
        ours = pct([getattr(s, pick) for s in samples["openai"]], 50)
        theirs = pct([getattr(s, pick) for s in samples["rest"]], 50)
        ratio = ours / theirs
        rows.append((f"{measure} p50, /openai/v1/ over /api/v1/", f"{ratio:.2f}x",
                     f"<= {TARGET_RATIO}x", ratio <= TARGET_RATIO))  # fmt: skip
    table_print(rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=60)
    parser.add_argument("--tokens-per-second", type=float, default=50.0)
    common_arguments(parser)
    args = parser.parse_args()
    if min(args.clients, args.rounds, args.tokens) <= 0:
        parser.error("counts must be positive")
    if database_refused("openai_api", args.allow_sqlite):
        return 2
    call_command("migrate", interactive=False, verbosity=0)
    # One bench user sends every request: its budgets must not be what is measured.
    env = {"PARLEY_API_THROTTLE_RATE": "100000/minute"}
    env["PARLEY_API_MODEL_THROTTLE_RATE"] = "100000/minute"
    with procfile_stack(
        tokens=args.tokens, rate=args.tokens_per_second, first_token_delay=0.2, env=env
    ) as (stack, commands):
        print(
            f"bench.openai_api on {connection.display_name} ({connection.settings_dict['NAME']}),"
            f" {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}: {args.clients} "
            f"concurrent streamed replies of {args.tokens} tokens at {args.tokens_per_second:g}"
            f" tokens/s, {args.rounds} rounds per door after a warm-up round"
        )
        print("\n".join(f"  {name}: {command}" for name, command in commands.items()) + "\n")
        samples: dict[str, list[Sample]] = {"openai": [], "rest": []}
        for turn in range(args.rounds + 1):
            for door in ("rest", "openai"):
                progress(f"round {turn} ({'warm-up' if turn == 0 else 'timed'}): {door}")
                conversations = [stack.conversation() for _ in range(args.clients)]
                got = asyncio.run(round_run(stack, door, conversations))
                if turn:
                    samples[door] += got
        report(samples)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
