"""A cap on wrong passwords, per account and per client address, for every door that
takes one: the web log-in, the admin's log-in and the API's password path.

Past PARLEY_LOGIN_MAX_FAILURES wrong passwords for one account, or
PARLEY_LOGIN_MAX_FAILURES_PER_ADDRESS from one address, within PARLEY_LOGIN_LOCK_SECONDS,
even the right password is refused until the window ends, so a guesser learns nothing
from the answer. The counters live in the cache (Redis in production), shared by every
web process. The address is REMOTE_ADDR: behind a proxy, Daphne's --proxy-headers sets it
from X-Forwarded-For, which is trusted only then.
"""

import time
from typing import Any

from django.conf import settings
from django.core.cache import cache
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest

PREFIX = "parley:login-fail"


def client_address(request: Any) -> str:
    meta = getattr(request, "META", None) or {}
    return str(meta.get("REMOTE_ADDR", ""))


def _keys(username: str, address: str) -> list[tuple[str, int]]:
    return [
        (f"{PREFIX}:user:{username.strip().lower()}", settings.PARLEY_LOGIN_MAX_FAILURES),
        (f"{PREFIX}:addr:{address}", settings.PARLEY_LOGIN_MAX_FAILURES_PER_ADDRESS),
    ]


def login_lock_remaining(*, username: str, address: str) -> int:
    """Seconds until this account or address may try again; 0 when it may now."""
    now = time.time()
    remaining = 0.0
    for key, limit in _keys(username, address):
        entry = cache.get(key)
        if entry and entry["count"] >= limit:
            remaining = max(remaining, entry["until"] - now)
    return max(0, int(remaining + 0.999))


def login_failure_record(*, username: str, address: str) -> None:
    window = settings.PARLEY_LOGIN_LOCK_SECONDS
    now = time.time()
    for key, _limit in _keys(username, address):
        entry = cache.get(key)
        if not entry or entry["until"] <= now:
            entry = {"count": 0, "until": now + window}
        entry["count"] += 1
        cache.set(key, entry, max(1, int(entry["until"] - now + 1)))


def login_success_record(*, username: str) -> None:
    """The account's own count starts again (the address keeps its count: one address
    guessing many accounts is the other half of the cap)."""
    cache.delete(_keys(username, "")[0][0])


def lock_message(seconds: int) -> str:
    minutes = max(1, -(-seconds // 60))
    return (
        "Too many failed log-in attempts for this account or from this address. "
        f"Try again in {minutes} minute{'s' if minutes != 1 else ''}."
    )


class LoginLockBackend:
    """First in AUTHENTICATION_BACKENDS: refuses every password check of a locked account
    or address, whatever path asked (Django stops at a backend's PermissionDenied). It has
    no get_user on purpose: it never signs anyone in, so no session may name it."""

    def authenticate(
        self, request: HttpRequest | None, username: str | None = None, **kwargs: Any
    ) -> None:
        if username is not None and login_lock_remaining(
            username=username, address=client_address(request)
        ):
            raise PermissionDenied
        return None
