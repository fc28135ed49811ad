"""The reads behind accounts.sockets' credential check, cheap enough for every frame.

Each kind of credential is one SQL statement that joins the user with the key or the
session row (the ORM would spend more time building the query than the database spends
answering it), and the pure, costly parts (unsigning the session data, the session auth
HMAC) are memoized on exactly the inputs they depend on, secrets included, so a changed
SECRET_KEY or SECRET_KEY_FALLBACKS simply misses the cache.
"""

import functools
from datetime import datetime
from importlib import import_module
from typing import Any, cast
from uuid import UUID

from django.conf import settings
from django.contrib.auth import HASH_SESSION_KEY, SESSION_KEY
from django.db import connections, router
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import Field, Model
from django.utils import timezone

from accounts.models import ApiKey, User
from config.rows import column, value_reader

# Live sockets per process, with room for their sessions' data changing meanwhile.
CACHE_SIZE = 1024


def _connection() -> BaseDatabaseWrapper:
    return connections[router.db_for_read(User)]


def _field(model: type[Model], name: str) -> "Field[Any, Any]":
    return cast("Field[Any, Any]", model._meta.get_field(name))


def _column(model: type[Model], name: str, alias: str, connection: BaseDatabaseWrapper) -> str:
    return f"{alias}.{column(model, name)}"


def _table(model: type[Model], alias: str, connection: BaseDatabaseWrapper) -> str:
    return f"{connection.ops.quote_name(model._meta.db_table)} {alias}"


def _prep(model: type[Model], name: str, value: Any, connection: BaseDatabaseWrapper) -> Any:
    return _field(model, name).get_db_prep_value(value, connection, prepared=False)


@functools.cache
def _key_sql(alias: str) -> str:
    c = connections[alias]
    return (
        f"SELECT 1 FROM {_table(ApiKey, 'k', c)} "
        f"INNER JOIN {_table(User, 'u', c)} "
        f"ON {_column(User, 'id', 'u', c)} = {_column(ApiKey, 'owner', 'k', c)} "
        f"WHERE {_column(ApiKey, 'id', 'k', c)} = %s AND {_column(User, 'id', 'u', c)} = %s "
        f"AND {_column(User, 'is_active', 'u', c)} = %s "
        f"AND {_column(ApiKey, 'revoked_at', 'k', c)} IS NULL"
    )


def key_live(*, user_id: int, api_key_id: UUID) -> bool:
    """Whether the key is the active user's own and not revoked."""
    c = _connection()
    params = [
        _prep(ApiKey, "id", api_key_id, c),
        _prep(User, "id", user_id, c),
        _prep(User, "is_active", True, c),
    ]
    with c.cursor() as cursor:
        cursor.execute(_key_sql(c.alias), params)
        return cursor.fetchone() is not None


@functools.cache
def _user_sql(alias: str) -> str:
    c = connections[alias]
    return (
        f"SELECT {_column(User, 'password', 'u', c)} FROM {_table(User, 'u', c)} "
        f"WHERE {_column(User, 'id', 'u', c)} = %s AND {_column(User, 'is_active', 'u', c)} = %s"
    )


def user_password(*, user_id: int) -> str | None:
    """The active user's password hash (what their session auth hash follows), or None."""
    c = _connection()
    params = [_prep(User, "id", user_id, c), _prep(User, "is_active", True, c)]
    with c.cursor() as cursor:
        cursor.execute(_user_sql(c.alias), params)
        row = cursor.fetchone()
    return None if row is None else str(row[0])


@functools.cache
def _session_sql(alias: str, session_model: type[Model]) -> str:
    c = connections[alias]
    m = session_model
    return (
        f"SELECT {_column(User, 'password', 'u', c)}, {_column(m, 'session_data', 's', c)}, "
        f"{_column(m, 'expire_date', 's', c)} "
        f"FROM {_table(User, 'u', c)} CROSS JOIN {_table(m, 's', c)} "
        f"WHERE {_column(User, 'id', 'u', c)} = %s AND {_column(User, 'is_active', 'u', c)} = %s "
        f"AND {_column(m, 'session_key', 's', c)} = %s AND {_column(m, 'expire_date', 's', c)} > %s"
    )


def user_and_session_row(
    *, user_id: int, session_key: str, session_model: type[Model]
) -> tuple[str, str, datetime] | None:
    """The active user's password hash with the live (unexpired) session row's data and
    expiry, or None when either is missing."""
    c = _connection()
    params = [
        _prep(User, "id", user_id, c),
        _prep(User, "is_active", True, c),
        _prep(session_model, "session_key", session_key, c),
        _prep(session_model, "expire_date", timezone.now(), c),
    ]
    with c.cursor() as cursor:
        cursor.execute(_session_sql(c.alias, session_model), params)
        row = cursor.fetchone()
    if row is None:
        return None
    password, session_data, expire_date = row
    expires_at = value_reader(session_model, "expire_date", c)(expire_date)
    return str(password), session_data, expires_at


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
