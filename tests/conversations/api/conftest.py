"""Clients for every way of calling the API."""

from collections.abc import Callable
from typing import Any

import pytest
from django.core.cache import cache
from rest_framework.test import APIClient

from accounts import services as account_services
from accounts.models import User

# Runs driven in this process against the fake upstream (see tests/conversations/conftest.py).
from tests.conversations.conftest import enqueued, upstream  # noqa: F401


@pytest.fixture(autouse=True)
def fresh_throttles() -> None:
    """Throttle counters are keyed by user id, and SQLite reuses the ids of rolled-back
    users: without this, one test would spend the next one's request budget."""
    cache.clear()


@pytest.fixture
def as_user() -> Callable[[User], APIClient]:
    """A client logged in with a session (as a browser would be)."""

    def make(user: User) -> APIClient:
        client = APIClient()
        client.force_login(user)
        return client

    return make


@pytest.fixture
def with_key() -> Callable[[User], APIClient]:
    """A client sending a fresh API key of `user` as a Bearer token."""

    def make(user: User) -> APIClient:
        _, secret = account_services.api_key_create(owner=user, name="tests")
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
        return client

    return make


@pytest.fixture
def api(owner, as_user) -> APIClient:
    """The owner's session client."""
    return as_user(owner)


def error_of(response: Any) -> dict[str, Any]:
    body: dict[str, Any] = response.json()
    assert set(body) == {"error"}, body
    assert {"code", "message"} <= set(body["error"]), body
    return body["error"]
