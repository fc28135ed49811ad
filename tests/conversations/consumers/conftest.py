"""Every socket test: the consumer reaches the database from a helper thread."""

import pytest


@pytest.fixture(autouse=True)
def _thread_connections_closed(close_thread_connections: None) -> None:
    """The consumer's helper-thread connections closed after each test."""
