from collections.abc import Iterator
from typing import Any

import pytest

from accounts.models import User
from conversations import services
from conversations.models import Conversation


@pytest.fixture
def owner(db) -> User:
    return User.objects.create_user(username="alice", password="pw-alice-123")


@pytest.fixture
def outsider(db) -> User:
    return User.objects.create_user(username="mallory", password="pw-mallory-123")


@pytest.fixture
def conversation(owner) -> Conversation:
    return services.conversation_create(owner=owner, title="Cats")


def pytest_report_header(config: pytest.Config) -> str:
    from django.conf import settings

    database = settings.DATABASES["default"]
    return f"database: {database['ENGINE'].rsplit('.', 1)[-1]} ({database['NAME']})"


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """A real Redis-protocol server: the one in REDIS_URL (CI, a developer's machine), or an
    embedded Valkey started for this test session, as `make run` does."""
    from tests.redis_server import redis_start

    url, stop = redis_start()
    yield url
    stop()


from tests.fake_openai import FakeOpenAI  # noqa: E402
from tests.protocol_check import protocol_checked  # noqa: E402, F401  # every test, autouse


@pytest.fixture
def fake_openai() -> Iterator[FakeOpenAI]:
    """A started fake OpenAI-compatible server (see tests/fake_openai.py), stopped after."""
    with FakeOpenAI() as server:
        yield server


@pytest.fixture
def event_log_redis(redis_url: str, settings: Any) -> Iterator[Any]:
    """A Redis-protocol server for the run event logs alone, which the test may restart
    (its data dropped, as a restarted cache-only Redis does); the channel layer, the broker
    and the caches stay on the session's server."""
    from tests.e2e.faults import RestartableRedis

    server = RestartableRedis()
    server.start()
    settings.REDIS_URL = server.url
    yield server
    server.stop()
