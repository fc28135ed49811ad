"""Fixtures for the tool registry's tests."""

import pytest

from conversations import tools


@pytest.fixture
def registry():
    """Test tools registered inside this fixture vanish afterwards."""
    with tools.isolated_registry():
        yield
