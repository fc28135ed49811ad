"""Clients for every way of calling the API."""

from collections.abc import Callable

import pytest
from rest_framework.test import APIClient

from accounts import services as account_services
from accounts.models import User


@pytest.fixture(autouse=True)
def _throttles_fresh(fresh_throttles: None) -> None:
    """Every API test starts with its own request budgets."""


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
