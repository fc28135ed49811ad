"""A cap on wrong passwords, per account and per client address, for every door that
takes one: the web log-in, the admin's log-in, the password change form and the API's
password path.

Every password check first takes a place in both counters (atomically, so a burst of
parallel guesses cannot all slip in before the first failure is counted); a success
gives its place back. Past PARLEY_LOGIN_MAX_FAILURES wrong passwords for one account, or
PARLEY_LOGIN_MAX_FAILURES_PER_ADDRESS from one address, within PARLEY_LOGIN_LOCK_SECONDS,
the next attempt locks that account or address for PARLEY_LOGIN_LOCK_SECONDS: even the
right password is refused until then, so a guesser learns nothing from the answer. The
counters live in the cache (Redis in production), shared by every web process.

The address is the peer's, or, behind PARLEY_TRUSTED_PROXY_COUNT proxies, the one the
outermost trusted proxy saw: X-Forwarded-For is read from its right end, where the
proxies append, never from its left end, which the client writes.
"""

import hashlib
import ipaddress
import time
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings
from django.core.cache import cache
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest

from accounts.usernames import username_case_fold

PREFIX = "parley:login"
# Marks a request whose password check took a place in the counters.
ATTEMPT_ATTRIBUTE = "_parley_login_attempt"


def client_address(request: Any) -> str:
    """The client's address as this deployment can trust it; "" when there is no request.
    IPv6 addresses count by their /64, the block one subscriber usually holds."""
    meta = getattr(request, "META", None) or {}
    address = str(meta.get("REMOTE_ADDR", ""))
    proxies = settings.PARLEY_TRUSTED_PROXY_COUNT
    if proxies > 0:
        hops = [hop.strip() for hop in str(meta.get("HTTP_X_FORWARDED_FOR", "")).split(",")]
        hops = [hop for hop in hops if hop]
        if hops:
            address = hops[-min(proxies, len(hops))]
    return _address_block(address)


def _address_block(address: str) -> str:
    try:
        parsed = ipaddress.ip_address(address.strip().strip("[]"))
    except ValueError:
        return address[:64]
    if isinstance(parsed, ipaddress.IPv6Address):
        if parsed.ipv4_mapped is not None:
            return str(parsed.ipv4_mapped)
        return str(ipaddress.IPv6Network((parsed, 64), strict=False))
    return str(parsed)


def _account(username: str) -> str:
    # As log-in matches names (any case of one's own, accounts.usernames), whatever the
    # surrounding spaces, so every spelling that reaches an account shares its count;
    # hashed so any text makes a valid cache key.
    normal = username_case_fold(username=username).strip()
    return hashlib.sha256(normal.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def _counters(username: str, address: str) -> list[tuple[str, int]]:
    counters = [(f"{PREFIX}:user:{_account(username)}", settings.PARLEY_LOGIN_MAX_FAILURES)]
    if address:  # authenticate() without a request (shell, tests) has no address
        counters.append(
            (f"{PREFIX}:addr:{address}", settings.PARLEY_LOGIN_MAX_FAILURES_PER_ADDRESS)
        )
    return counters


def _lock_remaining(key: str, now: float) -> float:
    until = cache.get(f"{key}:lock")
    return float(until) - now if until is not None and float(until) > now else 0.0


def _seconds(remaining: float) -> int:
    return max(0, int(remaining + 0.999))


def login_lock_remaining(*, username: str, address: str) -> int:
    """Seconds until this account or address may try again; 0 when it may now."""
    now = time.time()
    return _seconds(max(_lock_remaining(key, now) for key, _ in _counters(username, address)))


def login_attempt_begin(*, username: str, address: str) -> int:
    """Take a place for one password check; 0 when it may go ahead, else the seconds the
    account or address stays locked. A check that succeeds must call
    login_attempt_succeeded; a failed one keeps its place, which is what counts it."""
    now = time.time()
    counters = _counters(username, address)
    remaining = max(_lock_remaining(key, now) for key, _ in counters)
    if remaining:
        return _seconds(remaining)
    window = settings.PARLEY_LOGIN_LOCK_SECONDS
    for key, limit in counters:
        if _take(key, window) > limit:
            # The first to pass the cap starts the lock; a concurrent one shares it. The
            # count ends just before the lock, so the next window starts afresh.
            cache.add(f"{key}:lock", now + window, window)
            cache.touch(key, max(1, window - 1))
            remaining = max(remaining, _lock_remaining(key, now) or window)
    return _seconds(remaining)


def _take(key: str, window: int) -> int:
    for _attempt in range(3):
        cache.add(key, 0, window)  # the window starts with the first attempt
        try:
            return int(cache.incr(key))
        except ValueError:  # expired between the two calls
            continue
    return 1


def login_attempt_succeeded(*, request: Any) -> None:
    """The password checked on this request was right: the account's count starts again,
    and the address gets back the place this attempt took (it keeps its count of
    failures: one address guessing many accounts is the other half of the cap). Only a
    request whose check took a place gives one back, so other log-ins (a new account's
    first) cannot buy an address more guesses."""
    taken = getattr(request, ATTEMPT_ATTRIBUTE, None)
    if taken is not None:
        delattr(request, ATTEMPT_ATTRIBUTE)
        login_attempt_refund(username=taken[0], address=taken[1])


def login_attempt_refund(*, username: str, address: str) -> None:
    """Give back the place a successful password check took."""
    account_key, *address_keys = (key for key, _ in _counters(username, address))
    cache.delete(account_key)
    for key in address_keys:
        try:
            if int(cache.get(key) or 0) > 0:
                cache.decr(key)
        except ValueError:  # expired meanwhile: nothing to give back
            pass


def lock_message(seconds: int) -> str:
    minutes = max(1, -(-seconds // 60))
    return (
        "Too many failed log-in attempts for this account or from this address. "
        f"Try again in {minutes} minute{'s' if minutes != 1 else ''}."
    )


class LoginLockBackend:
    """First in AUTHENTICATION_BACKENDS: every password check on any path takes its place
    here, and a locked account or address is refused (Django stops at a backend's
    PermissionDenied). It has no get_user on purpose: it never signs anyone in, so no
    session may name it."""

    def authenticate(
        self, request: HttpRequest | None, username: str | None = None, **kwargs: Any
    ) -> None:
        # Without a request (the shell, a test client's login) nobody is guessing remotely.
        if username is None or request is None:
            return None
        address = client_address(request)
        if login_attempt_begin(username=username, address=address):
            raise PermissionDenied
        setattr(request, ATTEMPT_ATTRIBUTE, (username, address))
        return None

    async def aauthenticate(
        self, request: HttpRequest | None, username: str | None = None, **kwargs: Any
    ) -> None:
        # django.contrib.auth.aauthenticate asks every backend for this.
        return await sync_to_async(self.authenticate)(request, username, **kwargs)
