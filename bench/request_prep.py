"""Request preparation benchmark (issue 19): the CPU to prepare and send one chat request.

For model inputs built from 10, 100 and 400 history messages (bench.state's turns: ~200-
character prose, tool-call groups in 40% of turns, through `context.build_model_input`,
with the default tools), it times one streamed request two ways against the fake upstream:

- typed: the SDK's `chat.completions.with_streaming_response.create(...)`, as the provider
  sent it before issue 19 (its `maybe_transform` walks every message and tool);
- plain: the provider's request today (`OpenAIProvider._open`: the same body as a plain
  dict through the SDK's generic `post`);

each sent, its one-token reply read with the provider's SSE reader, and closed. CPU is
`time.process_time()` of this process, which sends the request on one uvloop event loop;
the fake (tests/fake_openai.py, zero latency, one token) runs in its own process
(`tests.fake_openai_server`), so its parsing of the body is not counted. Also timed, on
their own: `json.dumps` of the body (the floor: serialising it is unavoidable) and
`maybe_transform` of the typed params (what the plain path no longer pays). The paths
alternate and sizes are round-robin, so drift hits them alike; each cell is a median of
`--repeats`, after a warm-up.

    .venv/bin/python -m bench.request_prep [--sizes 10,100,400] [--repeats 60]
"""

# bench.state sets Django up (settings only: no database is used here).
from bench.state import turns  # isort: skip

import argparse
import itertools
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from functools import partial
from pathlib import Path
from random import Random
from typing import Any

import openai
import uvloop
from openai._utils import maybe_transform
from openai.types.chat.completion_create_params import CompletionCreateParamsStreaming

from bench.common import fake_start, pct, progress
from conversations.context import HistoryMessage, build_model_input
from conversations.engine.llm.base import GenerationSettings
from conversations.engine.llm.openai_provider import OpenAIProvider, _request_body
from conversations.engine.llm.openai_sse import read_chunks
from conversations.tools.registry import tool_default_names, tool_definitions

MODEL = "gpt-4o-mini"
GENERATION = GenerationSettings(max_output_tokens=1024, temperature=0.7)
WARM_UP = 5


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="10,100,400", help="history messages, comma-separated")
    parser.add_argument("--repeats", type=int, default=60, help="timed requests per cell")
    args = parser.parse_args()
    args.sizes = [int(size) for size in args.sizes.split(",")]
    if args.repeats < 2 or min(args.sizes) < 1:
        parser.error("need --repeats >= 2 and positive sizes")
    return args


def model_input(size: int) -> list[dict[str, Any]]:
    """The messages a step sends for a conversation whose read tail is `size` messages."""
    history = [
        HistoryMessage(
            role=fields["role"],
            content=fields.get("content", ""),
            tool_calls=fields.get("tool_calls", []),
            tool_call_id=fields.get("tool_call_id", ""),
        )
        for fields in itertools.islice(turns(Random(size)), size)
    ]
    return build_model_input(
        system_prompt="You are a helpful assistant.",
        history=history,
        draft="Dear Bob, the quarterly numbers are in.",
        token_budget=10**9,
    )


def typed_params(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> dict[str, Any]:
    """The arguments the provider gave `chat.completions.create` before issue 19."""
    return {
        "model": MODEL,
        "messages": messages,
        "tools": tools or openai.omit,
        "max_completion_tokens": GENERATION.max_output_tokens,
        "temperature": GENERATION.temperature,
        "stream": True,
        "stream_options": {"include_usage": True},
    }


Opener = Callable[[], AbstractAsyncContextManager[openai.AsyncAPIResponse[Any]]]


async def send(opener: Opener) -> float:
    """CPU seconds to prepare and send one request and read its (one-token) reply."""
    started = time.process_time()
    async with opener() as response:
        async for _ in read_chunks(response):
            pass
    return time.process_time() - started


def cpu_of(function: Callable[[], object]) -> float:
    started = time.process_time()
    function()
    return time.process_time() - started


async def measure(
    base_url: str, sizes: list[int], repeats: int
) -> dict[tuple[int, str], list[float]]:
    provider = OpenAIProvider(api_key="sk-bench", base_url=base_url, max_retries=0)
    tools = tool_definitions(tool_default_names())
    completions = provider.client.chat.completions.with_streaming_response
    samples: dict[tuple[int, str], list[float]] = {}
    openers: dict[int, dict[str, Opener]] = {}
    floors: dict[int, dict[str, Callable[[], object]]] = {}
    for size in sizes:
        messages = model_input(size)
        params = typed_params(messages, tools)
        body = _request_body(MODEL, messages, tools, GENERATION, legacy=False)
        # The plain body must be the typed path's (the key order on the wire too is checked
        # by tests/conversations/llm/test_request_body.py).
        expected = maybe_transform(params, CompletionCreateParamsStreaming)
        assert body == expected, "the bodies differ"
        openers[size] = {
            "typed": partial(completions.create, **params),
            "plain": partial(provider._open, MODEL, messages, tools, GENERATION, False),
        }
        floors[size] = {
            "dumps": partial(json.dumps, body),
            "transform": partial(maybe_transform, params, CompletionCreateParamsStreaming),
        }
        samples[(size, "messages")] = [float(len(messages))]
        samples[(size, "kib")] = [len(json.dumps(body).encode()) / 1024]
        for _ in range(WARM_UP):
            for opener in openers[size].values():
                await send(opener)
    for repeat in range(repeats):
        for size in sizes:
            # Alternate which path goes first, so neither always follows the other.
            paths = list(openers[size].items())
            for name, opener in paths if repeat % 2 else paths[::-1]:
                samples.setdefault((size, name), []).append(await send(opener))
            for name, function in floors[size].items():
                samples.setdefault((size, name), []).append(cpu_of(function))
        if (repeat + 1) % 10 == 0:
            progress(f"{repeat + 1}/{repeats} rounds")
    await provider.aclose()
    return samples


def report(samples: dict[tuple[int, str], list[float]], sizes: list[int], repeats: int) -> None:
    def ms(size: int, name: str, q: int = 50) -> float:
        values = samples[(size, name)]
        return 1000 * (statistics.median(values) if q == 50 else pct(values, q))

    print(
        f"bench.request_prep: Python {sys.version.split()[0]}, openai {openai.__version__}, "
        f"repeats={repeats}, CPU ms per request (time.process_time)\n"
    )
    header = (
        "| history | messages sent | body KiB | typed median | typed p90 | plain median "
        "| plain p90 | saved | json.dumps | maybe_transform alone |"
    )
    print(header)
    print("|---:" * (header.count("|") - 1) + "|")
    for size in sizes:
        typed, plain = ms(size, "typed"), ms(size, "plain")
        print(
            f"| {size:,} | {int(samples[(size, 'messages')][0])} "
            f"| {samples[(size, 'kib')][0]:.1f} "
            f"| {typed:.2f} | {ms(size, 'typed', 90):.2f} "
            f"| {plain:.2f} | {ms(size, 'plain', 90):.2f} "
            f"| {typed / plain:.1f}x | {ms(size, 'dumps'):.2f} | {ms(size, 'transform'):.2f} |"
        )


def main() -> int:
    args = parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        fake, base_url = fake_start(
            tokens=1, rate=0.0, chunk_log=Path(scratch) / "chunks.jsonl", first_token_delay=0.0
        )
        try:
            samples = uvloop.run(measure(base_url, args.sizes, args.repeats))
        finally:
            fake.terminate()
            fake.wait(timeout=10)
    report(samples, args.sizes, args.repeats)
    return 0


if __name__ == "__main__":
    sys.exit(main())
