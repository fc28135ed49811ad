"""The request budgets, defined once and spent at every door: every request to /api/v1/
and /openai/v1/ and every websocket frame spends the user's `REQUESTS` budget; those whose
handler makes the model work (declared with `@model_work`) spend `MODEL_WORK` too. The
DRF throttle (conversations/throttles.py), the run-events stream and the websocket's
frame dispatch all call `budgets_take`, so one user's use of every door draws on the
same counters. The daily message quota is the other limit on model work; it is taken
where turns are stored (services/quotas.py). Reads of a shared link spend `SHARE_VIEWS`
per client address, from the page and the API alike.

Each budget counts the requests of the last period in buckets of a tenth of it, kept as
counters in the shared cache (the oldest bucket, which the period's start falls in,
counts for its share still inside). The current bucket's count is taken by an atomic
increment, so concurrent requests on any number of processes never pass more than the
rate allows. A refused request spends nothing. Rates are read from settings at each
call, so deployments and tests change them without a restart.
"""

import contextlib
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from asgiref.sync import sync_to_async
from django.conf import settings
from django.core.cache import cache
from django.core.exceptions import ImproperlyConfigured

from conversations.errors import Throttled

F = TypeVar("F", bound=Callable[..., Any])

_PERIODS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
# Each period is counted in this many buckets: a request leaves the count at most a tenth
# of a period late.
BUCKETS = 10
_MARK = "makes_model_work"


@dataclass(frozen=True)
class Budget:
    """Requests per period, per user (or per address before anyone is known)."""

    scope: str  # part of the counters' cache keys
    setting: str  # the rate, "<n>/<second|minute|hour|day>"; empty: no limit

    def rate(self) -> tuple[int, int] | None:
        """(requests, period in seconds), or None for no limit."""
        raw: str = getattr(settings, self.setting) or ""
        if not raw:
            return None
        count, _, period = raw.partition("/")
        seconds = _PERIODS.get(period.strip()[:1])
        if not count.strip().isdigit() or seconds is None:
            raise ImproperlyConfigured(
                f"{self.setting} must be '<n>/<second|minute|hour|day>', not {raw!r}"
            )
        return int(count), seconds


# Every request and every frame.
REQUESTS = Budget(scope="user", setting="PARLEY_API_THROTTLE_RATE")
# Requests and frames that make the model work (new turns, edits, regenerations, chat,
# stateless chat, responses stored or not).
MODEL_WORK = Budget(scope="model", setting="PARLEY_API_MODEL_THROTTLE_RATE")


# Reads of a shared link, per client address (signed in or not): a link passed around
# cannot be scraped at speed.
SHARE_VIEWS = Budget(scope="share", setting="PARLEY_SHARE_VIEW_THROTTLE_RATE")


def model_work(handler: F) -> F:
    """Declare that `handler` (a view's method handler or a websocket frame's) makes the
    model work: it spends the MODEL_WORK budget as well."""
    setattr(handler, _MARK, True)
    return handler


def makes_model_work(handler: Any) -> bool:
    return bool(getattr(handler, _MARK, False))


def budgets_take(*, ident: int | str, model_work: bool = False) -> None:
    """Spend one request of `ident`'s budgets (MODEL_WORK too for model work), or raise
    Throttled with the seconds until one is free, spending nothing."""
    budget_take(*((REQUESTS, MODEL_WORK) if model_work else (REQUESTS,)), ident=ident)


def budget_take(*budgets: Budget, ident: int | str) -> None:
    """Spend one request of each of `budgets` for `ident`, or raise Throttled with the
    seconds until one is free, spending nothing."""
    now = time.time()
    windows = [
        _Window.at(budget.scope, str(ident), rate, now)
        for budget in budgets
        if (rate := budget.rate()) is not None
    ]
    found = cache.get_many([key for window in windows for key in window.earlier])
    taken: list[str] = []
    for window in windows:
        wait = window.take(found)
        if wait is not None:
            for key in taken:
                _give_back(key)
            raise Throttled(max(1, math.ceil(wait)))
        taken.append(window.key)


async def abudgets_take(*, ident: int | str, model_work: bool = False) -> None:
    """`budgets_take` from async code, on a worker thread (the cache's calls block)."""
    await sync_to_async(budgets_take, thread_sensitive=False)(ident=ident, model_work=model_work)


def budgets_forget(*, ident: int | str) -> None:
    """Drop `ident`'s counters (tools that remove the users they made)."""
    now = time.time()
    keys = []
    for budget in (REQUESTS, MODEL_WORK):
        rate = budget.rate()
        if rate is not None:
            current = int(now // (rate[1] / BUCKETS))
            keys += [_key(budget.scope, str(ident), current - n) for n in range(BUCKETS + 1)]
    cache.delete_many(keys)


def _key(scope: str, ident: str, bucket: int) -> str:
    return f"throttle_{scope}_{ident}_{bucket}"


@dataclass(frozen=True)
class _Window:
    """One budget's last period for one ident, as bucket counters."""

    limit: int
    span: float  # a bucket's length, in seconds
    into: float  # how far into the current bucket, 0 to 1
    earlier: list[str]  # the other buckets' keys, oldest (the period's start) first
    key: str  # the current bucket's
    timeout: int

    @classmethod
    def at(cls, scope: str, ident: str, rate: tuple[int, int], now: float) -> "_Window":
        limit, period = rate
        span = period / BUCKETS
        current = int(now // span)
        return cls(
            limit=limit,
            span=span,
            into=min(max(now / span - current, 0.0), 1.0),
            earlier=[_key(scope, ident, current - n) for n in range(BUCKETS, 0, -1)],
            key=_key(scope, ident, current),
            timeout=period + 2 * math.ceil(span),
        )

    def take(self, found: dict[str, Any]) -> float | None:
        """Count one request in the current bucket: None, or the seconds to wait with the
        count given back when the last period holds too many. `found`: the earlier
        buckets' counters as read."""
        counts = [int(found.get(name) or 0) for name in self.earlier]
        counts.append(_increment(self.key, timeout=self.timeout))
        # The oldest bucket counts for the part of it still inside the last period.
        if counts[0] * (1 - self.into) + sum(counts[1:]) <= self.limit:
            return None
        _give_back(self.key)
        counts[-1] -= 1
        return _wait(self.limit, self.span, self.into, counts)


def _increment(key: str, *, timeout: int) -> int:
    incr_expiring = getattr(cache, "incr_expiring", None)  # the shared Redis cache's
    if incr_expiring is not None:  # one round trip
        return int(incr_expiring(key, timeout=timeout))
    try:
        return cache.incr(key)
    except ValueError:  # the bucket's first request
        if cache.add(key, 1, timeout=timeout):
            return 1
        return cache.incr(key)


def _give_back(key: str) -> None:
    with contextlib.suppress(ValueError):  # expired meanwhile: nothing to give back
        cache.decr(key)


def _wait(limit: int, span: float, into: float, counts: list[int]) -> float:
    """Seconds until one more request fits, if no other comes meanwhile: bucket by bucket
    from now, the first moment the oldest one's share has shrunk enough."""
    if limit <= 0:
        return span * BUCKETS
    for ahead in range(len(counts)):
        oldest, rest = counts[ahead], sum(counts[ahead + 1 :])
        room = limit - 1 - rest
        if room < 0:
            continue
        needed = 1 - room / oldest if oldest > room else 0.0
        return (ahead + max(needed, into if ahead == 0 else 0.0) - into) * span
    return (len(counts) - into) * span
