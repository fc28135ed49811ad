"""Every hand-written statement of accounts (accounts/sql) agrees with its ORM equivalent
(tests/support/sql_orm/accounts.py) on the same rows: an API key looked up by its hash, a
socket's key and session checked, for live credentials and every way one ends (revoked, expired,
another user's, an inactive user, unknown). Run on SQLite and on PostgreSQL."""

import uuid
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth import HASH_SESSION_KEY, SESSION_KEY
from django.contrib.sessions.backends.db import SessionStore
from django.contrib.sessions.models import Session
from django.db.models import Model
from django.utils import timezone

from accounts import sql
from accounts.models import ApiKey, User
from accounts.services import api_key_create, api_key_hash
from tests.support.sql_orm import accounts as sql_orm

pytestmark = pytest.mark.django_db


def fields(instance: Model | None) -> dict[str, Any] | None:
    if instance is None:
        return None
    return {f.attname: getattr(instance, f.attname) for f in type(instance)._meta.concrete_fields}


def key_read(hashed_secret: str) -> list[Any]:
    found = []
    for variant in (sql.api_key_by_hash, sql_orm.api_key_by_hash):
        key = variant(hashed_secret=hashed_secret)
        found.append(None if key is None else (fields(key), fields(key.owner)))
    return found


def test_an_api_key_is_looked_up_as_the_orm_looks_it_up(owner):
    key, secret = api_key_create(owner=owner, name="bot")
    hashed = api_key_hash(secret=secret)
    raw, orm = key_read(hashed)
    assert raw == orm
    assert raw is not None
    assert raw[0]["id"] == key.pk
    assert raw[1]["username"] == owner.username
    assert raw[0]["last_used_at"] is None  # a NULL datetime read as None

    ApiKey.objects.filter(pk=key.pk).update(last_used_at=timezone.now())
    assert key_read(hashed)[0] == key_read(hashed)[1]

    # An inactive owner's key is found; the caller refuses it.
    User.objects.filter(pk=owner.pk).update(is_active=False)
    raw, orm = key_read(hashed)
    assert raw == orm
    assert raw is not None
    assert raw[1]["is_active"] is False

    ApiKey.objects.filter(pk=key.pk).update(revoked_at=timezone.now())
    assert key_read(hashed) == [None, None]
    assert key_read(api_key_hash(secret="pk_unknown")) == [None, None]


def live_both(user_id: int, api_key_id: uuid.UUID) -> list[bool]:
    return [
        variant(user_id=user_id, api_key_id=api_key_id)
        for variant in (sql.api_key_live, sql_orm.api_key_live)
    ]


def test_a_socket_key_is_checked_as_the_orm_checks_it(owner, outsider):
    key, _ = api_key_create(owner=owner, name="bot")
    assert live_both(owner.pk, key.pk) == [True, True]
    assert live_both(outsider.pk, key.pk) == [False, False]  # someone else's key
    assert live_both(owner.pk, uuid.uuid4()) == [False, False]
    User.objects.filter(pk=owner.pk).update(is_active=False)
    assert live_both(owner.pk, key.pk) == [False, False]
    User.objects.filter(pk=owner.pk).update(is_active=True)
    ApiKey.objects.filter(pk=key.pk).update(revoked_at=timezone.now())
    assert live_both(owner.pk, key.pk) == [False, False]


def session_both(user_id: int, session_key: str) -> list[Any]:
    return [
        variant(user_id=user_id, session_key=session_key, session_model=Session)
        for variant in (sql.user_session_read, sql_orm.user_session_read)
    ]


def test_a_socket_session_is_read_as_the_orm_reads_it(owner, outsider):
    store = SessionStore()
    store[SESSION_KEY] = str(owner.pk)
    store[HASH_SESSION_KEY] = owner.get_session_auth_hash()
    store.create()
    assert store.session_key is not None
    key = store.session_key

    raw, orm = session_both(owner.pk, key)
    assert raw == orm
    assert raw is not None
    password, data, expires_at = raw
    assert password == owner.password
    assert data == Session.objects.get(pk=key).session_data
    assert expires_at == Session.objects.get(pk=key).expire_date
    assert expires_at.tzinfo is not None  # aware on SQLite too

    # The statement reads the named user's password beside any live session: whom the
    # session names is checked by the caller, after decoding it. Both ways alike.
    assert session_both(outsider.pk, key)[0] == session_both(outsider.pk, key)[1]
    assert session_both(owner.pk, "no-such-session") == [None, None]
    User.objects.filter(pk=owner.pk).update(is_active=False)
    assert session_both(owner.pk, key) == [None, None]
    User.objects.filter(pk=owner.pk).update(is_active=True)
    Session.objects.filter(pk=key).update(expire_date=timezone.now() - timedelta(seconds=1))
    assert session_both(owner.pk, key) == [None, None]
