"""Admin test fixtures: the three kinds of staff a permission boundary separates, and
conversations with real content."""

import pytest

from accounts.models import User
from conversations.models import Conversation
from tests.support.admin import MODERATOR_PERMISSIONS, chat, staff


@pytest.fixture
def plain_staff(db) -> User:
    """Staff, but with no permission on conversations."""
    return staff("plainstaff")


@pytest.fixture
def moderator(db) -> User:
    """Sees and manages metadata; may not read message text."""
    return staff("moderator", *MODERATOR_PERMISSIONS)


@pytest.fixture
def reader(db) -> User:
    """A moderator who may also read transcripts."""
    return staff("reader", *MODERATOR_PERMISSIONS, "view_transcript")


@pytest.fixture
def superuser(db) -> User:
    return User.objects.create_superuser(username="root", password="pw", email="r@example.com")


@pytest.fixture
def baking(owner) -> Conversation:
    return chat(owner)
