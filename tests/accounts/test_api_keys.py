"""API keys: shown once, stored hashed, usable as Bearer, refused once revoked."""

import hashlib

import pytest
from rest_framework.exceptions import AuthenticationFailed
from rest_framework.request import Request
from rest_framework.test import APIRequestFactory

from accounts import services
from accounts.authentication import ApiKeyAuthentication
from accounts.models import ApiKey


def authenticate(header: str | None):
    factory = APIRequestFactory()
    raw = factory.get("/", HTTP_AUTHORIZATION=header) if header is not None else factory.get("/")
    request = Request(raw)
    return ApiKeyAuthentication().authenticate(request)


@pytest.mark.django_db
def test_the_secret_is_returned_once_and_only_its_hash_is_stored(owner):
    key, secret = services.api_key_create(owner=owner, name="laptop")
    stored = ApiKey.objects.get(pk=key.pk)
    assert secret.startswith(f"prl_{stored.prefix}_")
    assert stored.hashed_secret == hashlib.sha256(secret.encode()).hexdigest()
    assert secret not in str(stored.__dict__)


@pytest.mark.django_db
def test_a_bearer_key_authenticates_its_owner_and_records_use(owner):
    key, secret = services.api_key_create(owner=owner, name="ci")
    user, used_key = authenticate(f"Bearer {secret}")
    assert user == owner
    assert used_key.pk == key.pk
    key.refresh_from_db()
    assert key.last_used_at is not None


@pytest.mark.django_db
def test_a_revoked_key_is_refused_at_once(owner):
    key, secret = services.api_key_create(owner=owner, name="old")
    services.api_key_revoke(api_key=key)
    with pytest.raises(AuthenticationFailed):
        authenticate(f"Bearer {secret}")


@pytest.mark.django_db
def test_another_users_key_authenticates_that_user_not_the_owner(owner, outsider):
    _, secret = services.api_key_create(owner=outsider, name="theirs")
    user, _ = authenticate(f"Bearer {secret}")
    assert user == outsider


@pytest.mark.django_db
def test_a_deactivated_users_key_is_refused(owner):
    _, secret = services.api_key_create(owner=owner, name="k")
    owner.is_active = False
    owner.save()
    with pytest.raises(AuthenticationFailed):
        authenticate(f"Bearer {secret}")


@pytest.mark.django_db
@pytest.mark.parametrize(
    "header", ["Bearer ", "Bearer prl_x_y z", "Bearer not-a-key", "Bearer prl_00000000_guess"]
)
def test_malformed_or_unknown_keys_are_refused(owner, header):
    with pytest.raises(AuthenticationFailed):
        authenticate(header)


@pytest.mark.django_db
@pytest.mark.parametrize("header", [None, "Basic dXNlcjpwdw=="])
def test_requests_without_a_bearer_key_are_left_to_other_authenticators(header):
    assert authenticate(header) is None


@pytest.mark.django_db
@pytest.mark.parametrize("name", ["", "   ", "n" * 101])
def test_a_key_needs_a_sensible_name(owner, name):
    with pytest.raises(ValueError, match="name"):
        services.api_key_create(owner=owner, name=name)
    assert not ApiKey.objects.exists()


@pytest.mark.django_db
def test_a_key_is_found_in_one_statement_with_its_owner_as_the_orm_reads_them(owner):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from accounts.selectors import api_key_for_secret

    key, secret = services.api_key_create(owner=owner, name="ci")
    with CaptureQueriesContext(connection) as queries:
        found = api_key_for_secret(secret=secret)
        assert found is not None
        found_owner = found.owner
    assert len(queries) == 1  # every API request asks: the owner comes along
    stored = ApiKey.objects.select_related("owner").get(pk=key.pk)
    fields = [field.attname for field in ApiKey._meta.concrete_fields]
    assert [getattr(found, name) for name in fields] == [getattr(stored, name) for name in fields]
    assert found_owner == owner
    assert found_owner.username == owner.username
    assert found_owner.password == stored.owner.password
    assert found._state.adding is False  # a stored row: saving it updates, never inserts
    services.api_keys_revoke(queryset=ApiKey.objects.filter(pk=key.pk))
    assert api_key_for_secret(secret=secret) is None
    assert api_key_for_secret(secret=secret + "x") is None
