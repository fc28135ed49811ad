"""Credential reads by hand-written SQL: an API key looked up on every API request, and a
socket's key or session checked on every frame.

Each is one statement, written once; the ORM spent more CPU building these queries and
their instances than the database spends answering them (bench/sql_paths.py measures
both ways).
"""

import functools
from datetime import datetime
from typing import Any, cast
from uuid import UUID

from django.db import connection, connections, router
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import Field, Model
from django.utils import timezone

from accounts.models import ApiKey, User
from accounts.sql.rows import Rows, column, value_reader

_KEYS, _OWNERS = Rows(ApiKey), Rows(User)


@functools.cache
def _key_sql() -> str:
    key, owner = column(ApiKey, "owner"), column(User, "id")
    return (
        f"SELECT {_KEYS.columns('k')}, {_OWNERS.columns('u')} FROM {_KEYS.table} k "
        f"JOIN {_OWNERS.table} u ON u.{owner} = k.{key} "
        f"WHERE k.{column(ApiKey, 'hashed_secret')} = %s "
        f"AND k.{column(ApiKey, 'revoked_at')} IS NULL"
    )


def api_key_by_hash(*, hashed_secret: str) -> ApiKey | None:
    """The unrevoked key with this hash, its owner read along (whether active or not), or
    None."""
    with connection.cursor() as cursor:
        cursor.execute(_key_sql(), [hashed_secret])
        row = cursor.fetchone()  # the hash is unique: one row at most
    if row is None:
        return None
    api_key = _KEYS.read(row)
    api_key.owner = _OWNERS.read(row[len(_KEYS.fields) :])
    return api_key


# --- a socket's credential ------------------------------------------------------------------


def _connection() -> BaseDatabaseWrapper:
    return connections[router.db_for_read(User)]


def _field(model: type[Model], name: str) -> "Field[Any, Any]":
    return cast("Field[Any, Any]", model._meta.get_field(name))


def _column(model: type[Model], name: str, alias: str) -> str:
    return f"{alias}.{column(model, name)}"


def _table(model: type[Model], alias: str, connection: BaseDatabaseWrapper) -> str:
    return f"{connection.ops.quote_name(model._meta.db_table)} {alias}"


def _prep(model: type[Model], name: str, value: Any, connection: BaseDatabaseWrapper) -> Any:
    return _field(model, name).get_db_prep_value(value, connection, prepared=False)


@functools.cache
def _live_key_sql(alias: str) -> str:
    c = connections[alias]
    return (
        f"SELECT 1 FROM {_table(ApiKey, 'k', c)} "
        f"INNER JOIN {_table(User, 'u', c)} "
        f"ON {_column(User, 'id', 'u')} = {_column(ApiKey, 'owner', 'k')} "
        f"WHERE {_column(ApiKey, 'id', 'k')} = %s AND {_column(User, 'id', 'u')} = %s "
        f"AND {_column(User, 'is_active', 'u')} = %s "
        f"AND {_column(ApiKey, 'revoked_at', 'k')} IS NULL"
    )


def api_key_live(*, user_id: int, api_key_id: UUID) -> bool:
    """Whether the key is the active user's own and not revoked."""
    c = _connection()
    params = [
        _prep(ApiKey, "id", api_key_id, c),
        _prep(User, "id", user_id, c),
        _prep(User, "is_active", True, c),
    ]
    with c.cursor() as cursor:
        cursor.execute(_live_key_sql(c.alias), params)
        return cursor.fetchone() is not None


@functools.cache
def _session_sql(alias: str, session_model: type[Model]) -> str:
    c = connections[alias]
    m = session_model
    return (
        f"SELECT {_column(User, 'password', 'u')}, {_column(m, 'session_data', 's')}, "
        f"{_column(m, 'expire_date', 's')} "
        f"FROM {_table(User, 'u', c)} CROSS JOIN {_table(m, 's', c)} "
        f"WHERE {_column(User, 'id', 'u')} = %s AND {_column(User, 'is_active', 'u')} = %s "
        f"AND {_column(m, 'session_key', 's')} = %s AND {_column(m, 'expire_date', 's')} > %s"
    )


def user_session_read(
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
