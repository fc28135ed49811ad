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
