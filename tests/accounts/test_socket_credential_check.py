"""The check every websocket frame makes of the credential that opened its socket: every
way a credential ends answers None, a live one answers how long it has left, and each
check is a single query."""

import logging
import math
from datetime import timedelta

import pytest
from django.contrib.sessions.backends.db import SessionStore
from django.contrib.sessions.models import Session
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from accounts import services as account_services
from accounts.models import ApiKey, User
from accounts.sockets import (
    SocketCredential,
    socket_credential_seconds_left,
    socket_credential_valid,
)

pytestmark = pytest.mark.django_db

OLD_SECRET = "an-old-secret-key-that-was-rotated-out-" + "x" * 20
NEW_SECRET = "the-new-secret-key-in-use-now-" + "y" * 20


def key_credential(user: User) -> tuple[SocketCredential, ApiKey]:
    key, _ = account_services.api_key_create(owner=user, name="bot")
    return SocketCredential(user_id=user.pk, api_key_id=key.pk), key


def logged_in(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def session_key(client: Client) -> str:
    return client.cookies["sessionid"].value


def session_credential(user: User, client: Client | None = None) -> SocketCredential:
    return SocketCredential(user_id=user.pk, session_key=session_key(client or logged_in(user)))


def left(credential: SocketCredential) -> float | None:
    return socket_credential_seconds_left(credential=credential)


def test_a_live_key_holds_for_ever(owner):
    credential, _ = key_credential(owner)
    assert left(credential) == math.inf
    assert socket_credential_valid(credential=credential)


def test_a_live_session_holds_until_it_expires(owner):
    client = logged_in(owner)
    store = SessionStore(session_key(client))
    store.set_expiry(600)
    store.save()
    seconds = left(session_credential(owner, client))
    assert seconds is not None
    assert 590 < seconds <= 600


def test_each_check_is_one_query(owner):
    key, _ = key_credential(owner)
    session = session_credential(owner)
    for credential in (key, session, key, session):  # the first and a cached decode alike
        with CaptureQueriesContext(connection) as queries:
            assert left(credential) is not None
        assert len(queries.captured_queries) == 1, queries.captured_queries


def test_an_ended_credential_is_one_query_too(owner):
    key, api_key = key_credential(owner)
    account_services.api_key_revoke(api_key=api_key)
    session = session_credential(owner)
    Session.objects.all().delete()
    for credential in (key, session):
        with CaptureQueriesContext(connection) as queries:
            assert left(credential) is None
        assert len(queries.captured_queries) == 1


def test_a_revoked_key_ends(owner):
    credential, key = key_credential(owner)
    account_services.api_key_revoke(api_key=key)
    assert left(credential) is None
    assert not socket_credential_valid(credential=credential)


def test_a_silently_revoked_key_ends(owner):
    credential, key = key_credential(owner)
    ApiKey.objects.filter(pk=key.pk).update(revoked_at=timezone.now())
    assert left(credential) is None


def test_a_deleted_key_ends(owner):
    credential, key = key_credential(owner)
    ApiKey.objects.filter(pk=key.pk).delete()
    assert left(credential) is None


def test_a_key_named_with_another_user_does_not_hold(owner, outsider):
    credential, _ = key_credential(outsider)
    assert left(SocketCredential(user_id=owner.pk, api_key_id=credential.api_key_id)) is None


def deactivate(user: User) -> None:
    User.objects.filter(pk=user.pk).update(is_active=False)


def delete(user: User) -> None:
    User.objects.filter(pk=user.pk).delete()


@pytest.mark.parametrize("end", [deactivate, delete], ids=["deactivated", "deleted"])
def test_ending_the_user_ends_both_kinds(owner, end):
    key, _ = key_credential(owner)
    session = session_credential(owner)
    assert left(key) is not None
    assert left(session) is not None
    end(owner)
    assert left(key) is None
    assert left(session) is None


def test_a_password_change_ends_sessions_but_not_keys(owner):
    key, _ = key_credential(owner)
    session = session_credential(owner)
    assert left(session) is not None  # and its hash is cached now
    owner.set_password("a-new-password-123")
    owner.save()
    assert left(session) is None
    assert left(key) == math.inf
    # A session made after the change holds.
    assert left(session_credential(owner)) is not None


def flush(client: Client) -> None:
    SessionStore(session_key(client)).delete()


def delete_row(client: Client) -> None:
    Session.objects.filter(session_key=session_key(client)).delete()


def expire(client: Client) -> None:
    past = timezone.now() - timedelta(seconds=1)
    Session.objects.filter(session_key=session_key(client)).update(expire_date=past)


def log_out(client: Client) -> None:
    client.logout()


@pytest.mark.parametrize(
    "end", [flush, delete_row, expire, log_out], ids=["flushed", "deleted", "expired", "logout"]
)
def test_an_ended_session_ends_and_no_other(owner, end):
    ending = logged_in(owner)
    credential = session_credential(owner, ending)
    staying = session_credential(owner)
    assert left(credential) is not None
    end(ending)
    assert left(credential) is None
    assert left(staying) is not None


def test_another_users_session_does_not_hold(owner, outsider):
    theirs = session_key(logged_in(outsider))
    assert left(SocketCredential(user_id=owner.pk, session_key=theirs)) is None
    assert left(SocketCredential(user_id=outsider.pk, session_key=theirs)) is not None


def test_a_session_that_changed_to_another_user_ends(owner, outsider):
    client = logged_in(owner)
    credential = session_credential(owner, client)
    assert left(credential) is not None
    store = SessionStore(session_key(client))
    store["_auth_user_id"] = str(outsider.pk)
    store.save()
    assert left(credential) is None


def test_a_session_whose_data_changed_still_holds(owner):
    client = logged_in(owner)
    credential = session_credential(owner, client)
    assert left(credential) is not None
    store = SessionStore(session_key(client))
    store["theme"] = "dark"
    store.save()
    assert left(credential) is not None


def test_a_session_without_a_key_does_not_hold(owner):
    assert left(SocketCredential(user_id=owner.pk)) is None
    assert left(SocketCredential(user_id=owner.pk, session_key="")) is None


def test_corrupt_session_data_does_not_hold_and_is_reported_each_time(owner, caplog):
    credential = session_credential(owner)
    Session.objects.filter(session_key=credential.session_key).update(session_data="garbage:1")
    with caplog.at_level(logging.WARNING, logger="django.security.SuspiciousSession"):
        assert left(credential) is None
        assert left(credential) is None
    assert [r.getMessage() for r in caplog.records].count("Session data corrupted") == 2


def test_a_session_made_under_a_fallback_secret_still_holds(owner, settings):
    settings.SECRET_KEY = OLD_SECRET
    credential = session_credential(owner)
    assert left(credential) is not None
    settings.SECRET_KEY = NEW_SECRET
    settings.SECRET_KEY_FALLBACKS = [OLD_SECRET]
    assert left(credential) is not None
    # Once the old secret is dropped from the fallbacks, nothing remembered lets it through.
    settings.SECRET_KEY_FALLBACKS = []
    assert left(credential) is None
    settings.SECRET_KEY_FALLBACKS = [OLD_SECRET]
    assert left(credential) is not None


def test_a_session_auth_hash_of_a_fallback_secret_holds(owner, settings):
    # Data signed with the current secret, the auth hash made under the old one (a
    # session saved again after the rotation): get_user accepts it, and so do sockets.
    settings.SECRET_KEY = OLD_SECRET
    old_hash = owner.get_session_auth_hash()
    settings.SECRET_KEY = NEW_SECRET
    client = logged_in(owner)
    store = SessionStore(session_key(client))
    store["_auth_user_hash"] = old_hash
    store.save()
    credential = session_credential(owner, client)
    assert left(credential) is None
    settings.SECRET_KEY_FALLBACKS = [OLD_SECRET]
    assert left(credential) is not None


class TestAnotherSessionEngine:
    """Sessions not kept in the database are read through the store, as before."""

    @pytest.fixture(autouse=True)
    def file_sessions(self, settings, tmp_path):
        settings.SESSION_ENGINE = "django.contrib.sessions.backends.file"
        settings.SESSION_FILE_PATH = str(tmp_path)

    def test_a_live_session_holds_and_ends_with_the_user(self, owner):
        credential = session_credential(owner)
        seconds = left(credential)
        assert seconds is not None
        assert seconds > 0
        deactivate(owner)
        assert left(credential) is None

    def test_a_flushed_session_or_a_password_change_ends_it(self, owner):
        client = logged_in(owner)
        credential = session_credential(owner, client)
        other = session_credential(owner)
        client.logout()
        assert left(credential) is None
        assert left(other) is not None
        owner.set_password("a-new-password-123")
        owner.save()
        assert left(other) is None
