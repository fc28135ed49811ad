"""Fixtures for the operators' endpoints: a Redis that is there, one that is not, one that
hangs, and a clean slate for the workers' heartbeat."""

import socket
from collections.abc import Iterator

import pytest
import redis

from config.heartbeat import HEARTBEAT_KEY
from tests.support.web_server import free_port


@pytest.fixture
def no_heartbeat(redis_url: str) -> Iterator[redis.Redis]:
    """The test Redis without any worker's heartbeat, before and after the test."""
    client = redis.Redis.from_url(redis_url)
    client.delete(HEARTBEAT_KEY)
    yield client
    client.delete(HEARTBEAT_KEY)
    client.close()


@pytest.fixture
def closed_port_url() -> str:
    """A Redis URL where nothing listens: every connection is refused at once."""
    return f"redis://127.0.0.1:{free_port()}/0"


@pytest.fixture
def hung_redis_url() -> Iterator[str]:
    """A Redis URL whose server takes connections and never answers (a hung server, or a
    network that drops the replies)."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)  # never accepted: the kernel completes the handshakes
        yield f"redis://127.0.0.1:{listener.getsockname()[1]}/0"
