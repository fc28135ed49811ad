"""Clients for every way of calling the API."""

from collections.abc import Callable

import pytest
from rest_framework.test import APIClient

from accounts import services as account_services
from accounts.models import ALL_SCOPES, User
from tests.support.bundles import with_files


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Schemathesis makes one test per API operation, but builds every one's node id from
    the bare function name. Parallel runs tell tests apart by node id (two would run one
    operation and drop the rest), so the operation joins the id as a parameter would."""
    for item in items:
        label = getattr(item, "operation_label", None)
        if label and item._id.params is None:
            item._id = item._id.with_params(label)


@pytest.fixture(autouse=True)
def _throttles_fresh(fresh_throttles: None) -> None:
    """Every API test starts with its own request budgets."""


@pytest.fixture
def with_key() -> Callable[[User], APIClient]:
    """A client sending a fresh API key of `user` as a Bearer token, with every scope."""

    def make(user: User) -> APIClient:
        scopes = sorted(ALL_SCOPES)
        _, secret = account_services.api_key_create(owner=user, name="tests", scopes=scopes)
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
        return client

    return make


@pytest.fixture
def api(owner, as_user) -> APIClient:
    """The owner's session client."""
    return as_user(owner)


@pytest.fixture
def trip(owner):
    """The owner's conversation with files (tests/support/bundles.py), and the files."""
    return with_files(owner)


@pytest.fixture
def outsider_api(outsider, as_user) -> APIClient:
    """The outsider's session client."""
    return as_user(outsider)


@pytest.fixture
def commits(django_capture_on_commit_callbacks):
    """What runs after a commit (a deleted file's bytes going) runs, as outside a test."""
    return django_capture_on_commit_callbacks
