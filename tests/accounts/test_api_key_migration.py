"""Keys made before keys had scopes keep the access they had: every scope."""

import pytest
from rest_framework.test import APIClient

from accounts import services
from accounts.models import ApiKey
from tests.support.migrations import latest, migrate

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE = [("accounts", "0002_idempotency_record")]


def test_keys_made_before_scopes_keep_full_access():
    executor = migrate(BEFORE)
    apps = executor.loader.project_state(BEFORE).apps
    OldUser = apps.get_model("accounts", "User")
    OldApiKey = apps.get_model("accounts", "ApiKey")
    user = OldUser.objects.create(username="old-timer")
    secret = "prl_0ld0ld00_an-old-secret"
    OldApiKey.objects.create(
        owner=user,
        name="old",
        prefix="0ld0ld00",
        hashed_secret=services.api_key_hash(secret=secret),
    )

    migrate(latest())

    key = ApiKey.objects.get(prefix="0ld0ld00")
    assert key.scopes == ["chat", "keys", "read"]
    assert key.created_by_key is None
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    assert client.get("/api/v1/api-keys/").status_code == 200
    made = client.post("/api/v1/api-keys/", {"name": "new", "scopes": ["keys"]}, format="json")
    assert made.status_code == 201
    assert client.post("/api/v1/conversations/", {"title": "t"}, format="json").status_code == 201
