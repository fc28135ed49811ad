"""Stateless chat: how a decompression bomb in `state` is refused.

A state is compressed, encrypted JSON the client sends back. One that inflates far past
PARLEY_STATELESS_STATE_MAX_BYTES must be refused (`too_large`) quickly and without ever
being held whole: the inflater stops at the limit. This times `state_decode` on bombs of
growing inflated size and records the peak memory allocated while decoding (tracemalloc),
beside an ordinary state, and prints a table:

    .venv/bin/python -m bench.stateless [--repeats 30] [--bombs 16,256,1024]

Targets: a bomb is refused in under 50 ms (median), and the peak memory of inflating it
stays the same whatever the bomb's size (bounded by the limit, not by what the state
would inflate to).
"""

import argparse
import contextlib
import json
import statistics
import time
import tracemalloc
import zlib

from bench.common import django_setup, pct

MIB = 1024 * 1024


def bomb(inflated_bytes: int) -> bytes:
    """A state document whose one message inflates to about `inflated_bytes`, compressed
    in pieces so building a 1 GiB bomb never holds a gigabyte here either."""
    head = b'{"version":2,"provider":"demo","user":1,"messages":[{"role":"user","content":"'
    compressor = zlib.compressobj()
    parts = [compressor.compress(head)]
    block = b"a" * MIB
    for _ in range(inflated_bytes // MIB):
        parts.append(compressor.compress(block))
    parts.append(compressor.compress(b'"}]}'))
    parts.append(compressor.flush())
    return b"".join(parts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--bombs", default="16,256,1024", help="MiB each bomb inflates to")
    args = parser.parse_args()
    bombs = [int(size) for size in args.bombs.split(",")]
    if args.repeats < 2 or not bombs or min(bombs) < 1:
        parser.error("need --repeats >= 2 and bomb sizes of 1 MiB or more")
    django_setup()
    from django.conf import settings

    from conversations.engine import stateless

    cipher = stateless._cipher()
    ordinary = stateless.state_encode(
        provider="demo",
        user_id=1,
        messages=[{"role": "user", "content": "hello " * 50}] * 40,
    )
    cases = [("ordinary (40 messages)", ordinary, "accepted")]
    for size in bombs:
        state = cipher.encrypt(bomb(size * MIB)).decode()
        cases.append((f"bomb inflating to {size} MiB", state, "too_large"))

    limit = settings.PARLEY_STATELESS_STATE_MAX_BYTES
    print(f"bench.stateless: limit {limit // MIB} MiB inflated, {args.repeats} decodes a row\n")
    print(
        "| state | state size KiB | outcome | decode p50 ms | p99 ms "
        "| peak memory, whole decode MiB | peak memory, inflating MiB |"
    )
    print("|---|---:|---|---:|---:|---:|---:|")
    verdicts = []
    for name, state, expected in cases:
        times = []
        outcome = ""
        for _ in range(args.repeats):
            started = time.perf_counter()
            try:
                stateless.state_decode(state, provider="demo", user_id=1)
                outcome = "accepted"
            except stateless.StateRejected as rejected:
                outcome = rejected.reason
            times.append((time.perf_counter() - started) * 1000)
        tracemalloc.start()
        with contextlib.suppress(stateless.StateRejected):
            stateless.state_decode(state, provider="demo", user_id=1)
        peak = tracemalloc.get_traced_memory()[1] / MIB
        tracemalloc.stop()
        # The inflating alone: the whole decode also holds the state string itself (its
        # base64, its decrypted bytes), which grows with what the client sent, not with
        # what it would inflate to.
        raw = cipher.decrypt(state.encode())
        tracemalloc.start()
        with contextlib.suppress(stateless.StateRejected):
            stateless._inflate(raw)
        inflating = tracemalloc.get_traced_memory()[1] / MIB
        tracemalloc.stop()
        median = statistics.median(times)
        print(
            f"| {name} | {len(state) / 1024:,.0f} | {outcome} | {median:.1f} "
            f"| {pct(times, 99):.1f} | {peak:.1f} | {inflating:.1f} |"
        )
        if expected == "too_large":
            verdicts.append((median < 50, inflating, outcome == expected))
    peaks = [peak for _, peak, _ in verdicts]
    fast = all(ok for ok, _, _ in verdicts)
    refused = all(ok for _, _, ok in verdicts)
    flat = max(peaks) - min(peaks) < 1.0
    print(
        f"\nbombs refused as too_large: {'PASS' if refused else 'FAIL'}; "
        f"under 50 ms: {'PASS' if fast else 'FAIL'}; "
        f"inflating peak flat ({min(peaks):.1f}-{max(peaks):.1f} MiB): {'PASS' if flat else 'FAIL'}"
    )
    print(json.dumps({"limit_bytes": limit}))


if __name__ == "__main__":
    main()
