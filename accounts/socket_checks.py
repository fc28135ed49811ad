"""What accounts.sockets' credential check needs besides its single-statement reads
(accounts/sql/credentials.py), cheap enough for every frame: unsigning the session data
and the session auth HMAC are memoized on exactly the inputs they depend on, secrets
included, so a changed SECRET_KEY or SECRET_KEY_FALLBACKS simply misses the cache.
"""

import functools
from importlib import import_module
from typing import Any

from django.conf import settings
from django.contrib.auth import HASH_SESSION_KEY, SESSION_KEY

from accounts.models import User

# Live sockets per process, with room for their sessions' data changing meanwhile.
CACHE_SIZE = 1024


def user_password(*, user_id: int) -> str | None:
    """The active user's password hash (what their session auth hash follows), or None.
    For sessions kept outside the database, whose check cannot join the session row."""
    active = User.objects.filter(pk=user_id, is_active=True)
    return active.values_list("password", flat=True).first()


@functools.lru_cache(maxsize=8)
def session_store_class(engine: str) -> Any:
    return import_module(engine).SessionStore


class _Undecodable(Exception):
    """Raised, not returned, so that corrupt data is never cached (and logged each time)."""


@functools.lru_cache(maxsize=CACHE_SIZE)
def _claims(
    store_class: Any, session_data: str, serializer: str, secret: str, fallbacks: tuple[str, ...]
) -> tuple[str, Any]:
    # serializer, secret and fallbacks are what decoding depends on besides the data.
    data = store_class().decode(session_data)
    if not data:
        raise _Undecodable
    return session_claims(data)


def session_claims(data: dict[str, Any]) -> tuple[str, Any]:
    """Whom session data names, and the session auth hash it was made with."""
    return str(data.get(SESSION_KEY)), data.get(HASH_SESSION_KEY) or ""


def decoded_session_claims(*, store_class: Any, session_data: str) -> tuple[str, Any] | None:
    """session_claims of a stored session's data, or None when it cannot be decoded."""
    try:
        return _claims(
            store_class,
            session_data,
            settings.SESSION_SERIALIZER,
            settings.SECRET_KEY,
            tuple(settings.SECRET_KEY_FALLBACKS),
        )
    except _Undecodable:
        return None


@functools.lru_cache(maxsize=CACHE_SIZE)
def _session_auth_hash(user_id: int, password: str, secret: str) -> str:
    user = User(pk=user_id, password=password)
    return str(user._get_session_auth_hash(secret=secret))  # type: ignore[attr-defined]


def session_auth_hashes(*, user_id: int, password: str) -> list[str]:
    """The session auth hashes a session of this user may carry: as
    django.contrib.auth.get_user, one follows the password, and sessions made under a
    previous SECRET_KEY still count while it is listed as a fallback."""
    secrets = [settings.SECRET_KEY, *settings.SECRET_KEY_FALLBACKS]
    return [_session_auth_hash(user_id, password, secret) for secret in secrets]
