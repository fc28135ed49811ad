"""API keys: shown once, stored hashed, usable as Bearer, refused once revoked."""

import hashlib

import pytest
from rest_framework.exceptions import AuthenticationFailed
from rest_framework.request import Request
from rest_framework.test import APIClient, APIRequestFactory

from accounts import services
from accounts.authentication import ApiKeyAuthentication
from accounts.models import ApiKey
from tests.support.api import error_of


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


# --- scopes ---------------------------------------------------------------------------------

KEYS_URL = "/api/v1/api-keys/"


def key_client(secret: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    return client


def make_key(owner, *scopes: str, created_by: ApiKey | None = None) -> tuple[ApiKey, APIClient]:
    key, secret = services.api_key_create(
        owner=owner, name="k", scopes=list(scopes), created_by=created_by
    )
    return key, key_client(secret)


@pytest.mark.django_db
def test_a_new_key_reads_and_chats_by_default_and_never_mints_keys_unasked(owner):
    key, _ = services.api_key_create(owner=owner, name="default")
    assert key.scopes == ["chat", "read"]
    chat_only, _ = services.api_key_create(owner=owner, name="chat", scopes=["chat"])
    assert chat_only.scopes == ["chat", "read"]  # chat includes reading what it wrote
    every, _ = services.api_key_create(owner=owner, name="all", scopes=["keys", "chat", "keys"])
    assert every.scopes == ["chat", "keys", "read"]


@pytest.mark.django_db
@pytest.mark.parametrize("scopes", [[], ["admin"], ["read", "Chat"]])
def test_unknown_scopes_or_none_are_refused_and_nothing_is_stored(owner, scopes):
    with pytest.raises(services.ScopesInvalid):
        services.api_key_create(owner=owner, name="k", scopes=scopes)
    assert not ApiKey.objects.exists()


@pytest.mark.django_db
def test_the_api_takes_scopes_and_shows_them(owner):
    client = APIClient()
    client.force_login(owner)
    created = client.post(KEYS_URL, {"name": "dash", "scopes": ["read"]}, format="json")
    assert created.status_code == 201
    assert created.json()["scopes"] == ["read"]
    assert created.json()["created_by_key_id"] is None
    default = client.post(KEYS_URL, {"name": "bot"}, format="json").json()
    assert default["scopes"] == ["chat", "read"]
    listed = {k["name"]: k["scopes"] for k in client.get(KEYS_URL).json()["results"]}
    assert listed == {"dash": ["read"], "bot": ["chat", "read"]}


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("body", "path"),
    [
        ({"name": "k", "scopes": ["admin"]}, "$.scopes"),
        ({"name": "k", "scopes": []}, "$.scopes"),
        ({"name": "k", "scopes": "read"}, "$.scopes"),
    ],
)
def test_the_api_refuses_bad_scopes_naming_them(owner, body, path):
    client = APIClient()
    client.force_login(owner)
    response = client.post(KEYS_URL, body, format="json")
    assert response.status_code == 400
    error = error_of(response)
    assert error["code"] == "invalid"
    [problem] = error["details"]["problems"]
    assert problem["path"].startswith(path)
    assert not ApiKey.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize("scopes", [["chat"], ["read"], ["chat", "read"]])
def test_a_key_without_the_keys_scope_cannot_list_create_or_revoke_keys(owner, scopes):
    other, _ = services.api_key_create(owner=owner, name="other", scopes=["read"])
    _, client = make_key(owner, *scopes)
    answers = [
        client.get(KEYS_URL),
        client.post(KEYS_URL, {"name": "minted"}, format="json"),
        client.delete(f"{KEYS_URL}{other.pk}/"),
    ]
    for response in answers:
        assert response.status_code == 403
        error = error_of(response)
        assert error["code"] == "insufficient_scope"
        assert error["details"] == {"required_scope": "keys"}
    assert not ApiKey.objects.filter(name="minted").exists()
    other.refresh_from_db()
    assert other.is_active


@pytest.mark.django_db
def test_a_keys_key_creates_keys_only_within_its_own_scopes(owner):
    parent, client = make_key(owner, "keys", "read")
    made = client.post(KEYS_URL, {"name": "reader", "scopes": ["read"]}, format="json")
    assert made.status_code == 201
    assert made.json()["scopes"] == ["read"]
    assert made.json()["created_by_key_id"] == str(parent.pk)
    # Without `scopes`: the default as far as the creator holds it.
    assert client.post(KEYS_URL, {"name": "d"}, format="json").json()["scopes"] == ["read"]
    for wanted in (["chat"], ["read", "chat"]):
        refused = client.post(KEYS_URL, {"name": "x", "scopes": wanted}, format="json")
        assert refused.status_code == 403
        error = error_of(refused)
        assert error["code"] == "insufficient_scope"
        assert error["details"] == {"required_scope": "chat"}
    assert set(ApiKey.objects.values_list("name", flat=True)) == {"k", "reader", "d"}


@pytest.mark.django_db
def test_a_keys_only_key_must_name_the_scopes_it_grants(owner):
    _, client = make_key(owner, "keys")
    response = client.post(KEYS_URL, {"name": "d"}, format="json")
    assert response.status_code == 400
    assert error_of(response)["details"]["problems"][0]["path"] == "$.scopes"
    made = client.post(KEYS_URL, {"name": "k2", "scopes": ["keys"]}, format="json")
    assert made.status_code == 201


@pytest.mark.django_db
def test_a_read_key_can_read_but_not_write(owner):
    _, client = make_key(owner, "read")
    assert client.get("/api/v1/conversations/").status_code == 200
    response = client.post("/api/v1/conversations/", {"title": "t"}, format="json")
    assert response.status_code == 403
    assert error_of(response)["code"] == "insufficient_scope"


@pytest.mark.django_db
def test_revoking_a_key_revokes_the_keys_it_created_and_theirs(owner):
    root, root_client = make_key(owner, "keys", "chat", "read")
    child_body = root_client.post(
        KEYS_URL, {"name": "child", "scopes": ["keys", "read"]}, format="json"
    ).json()
    child_client = key_client(child_body["key"])
    grandchild_body = child_client.post(
        KEYS_URL, {"name": "grandchild", "scopes": ["read"]}, format="json"
    ).json()
    grandchild_client = key_client(grandchild_body["key"])
    _, unrelated_client = make_key(owner, "read")
    assert grandchild_client.get("/api/v1/conversations/").status_code == 200

    session = APIClient()
    session.force_login(owner)
    assert session.delete(f"{KEYS_URL}{root.pk}/").status_code == 204

    for client in (root_client, child_client, grandchild_client):
        response = client.get("/api/v1/conversations/")
        assert response.status_code == 401
        assert error_of(response)["code"] == "authentication_failed"
    assert unrelated_client.get("/api/v1/conversations/").status_code == 200
    listed = session.get(KEYS_URL).json()["results"]
    assert {k["name"] for k in listed if k["revoked_at"]} == {"k", "child", "grandchild"}


@pytest.mark.django_db
def test_revoking_a_child_leaves_its_creator_working(owner):
    parent, parent_client = make_key(owner, "keys", "read")
    child, _ = make_key(owner, "read", created_by=parent)
    assert parent_client.delete(f"{KEYS_URL}{child.pk}/").status_code == 204
    child.refresh_from_db()
    assert not child.is_active
    assert parent_client.get(KEYS_URL).status_code == 200


@pytest.mark.django_db
def test_the_admins_bulk_revocation_cascades_too(owner):
    parent, _ = make_key(owner, "keys", "read")
    child, _ = make_key(owner, "keys", "read", created_by=parent)
    make_key(owner, "read", created_by=child)
    assert services.api_keys_revoke(queryset=ApiKey.objects.filter(pk=parent.pk)) == 3
    assert not ApiKey.objects.filter(revoked_at__isnull=True).exists()
    # Revoking again revokes nothing more.
    assert services.api_keys_revoke(queryset=ApiKey.objects.filter(pk=parent.pk)) == 0


@pytest.mark.django_db
def test_a_key_revokes_only_keys_within_its_own_scopes(owner):
    _, client = make_key(owner, "keys", "read")
    stronger, _ = make_key(owner, "chat")
    response = client.delete(f"{KEYS_URL}{stronger.pk}/")
    assert response.status_code == 403
    assert error_of(response)["code"] == "insufficient_scope"
    stronger.refresh_from_db()
    assert stronger.is_active
    weaker, _ = make_key(owner, "read")
    assert client.delete(f"{KEYS_URL}{weaker.pk}/").status_code == 204


@pytest.mark.django_db
def test_another_users_key_is_404_on_revoke_and_stays_active(owner, outsider):
    theirs, _ = make_key(outsider, "read")
    _, client = make_key(owner, "keys", "read")
    session = APIClient()
    session.force_login(owner)
    for caller in (client, session):
        response = caller.delete(f"{KEYS_URL}{theirs.pk}/")
        assert response.status_code == 404
        assert error_of(response)["code"] == "not_found"
    theirs.refresh_from_db()
    assert theirs.is_active


@pytest.mark.django_db
def test_a_key_revoked_while_it_creates_one_makes_none(owner):
    parent, _ = make_key(owner, "keys", "read")
    stale = ApiKey.objects.get(pk=parent.pk)  # as the request read it
    services.api_key_revoke(api_key=parent)
    with pytest.raises(services.ApiKeyRevoked):
        services.api_key_create(owner=owner, name="late", scopes=["read"], created_by=stale)
    assert not ApiKey.objects.filter(name="late").exists()
