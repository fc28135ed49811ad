"""Admin test fixtures: the three kinds of staff a permission boundary separates, and
conversations with real content."""

import pytest
from django.contrib.auth.models import Permission
from django.test import Client

from accounts.models import User
from conversations import services
from conversations.models import Conversation, Message
from conversations.services import NewMessage

SECRET = "the secret recipe is 3 eggs"

MODERATOR_PERMISSIONS = [
    "view_conversation",
    "change_conversation",
    "delete_conversation",
    "view_message",
    "view_run",
    "change_run",
    "view_auditevent",
]


def staff(username: str, *codenames: str) -> User:
    user = User.objects.create_user(username=username, password="pw", is_staff=True)
    user.user_permissions.set(Permission.objects.filter(codename__in=codenames))
    return User.objects.get(pk=user.pk)  # fresh: no stale permission cache


def client_for(user: User) -> Client:
    client = Client()
    # Named: the first configured backend is the log-in lock, which keeps no sessions.
    client.force_login(user, backend="django.contrib.auth.backends.ModelBackend")
    return client


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


def chat(owner: User, title: str = "Baking", turns: int = 2) -> Conversation:
    conversation = services.conversation_create(owner=owner, title=title, system_prompt="Be kind.")
    for turn in range(turns):
        services.user_message_append(conversation=conversation, content=f"{SECRET} #{turn}")
        services.message_append(
            conversation=conversation,
            message=NewMessage(
                role="assistant",
                content=f"Noted, turn {turn}.",
                usage={"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
            ),
        )
    return conversation


def long_chat(owner: User, messages: int) -> Conversation:
    conversation = services.conversation_create(owner=owner, title="Long")
    services.messages_append(
        conversation=conversation,
        messages=[NewMessage(role="user", content=f"line {i}") for i in range(1, messages + 1)],
    )
    return conversation


@pytest.fixture
def baking(owner) -> Conversation:
    return chat(owner)


def message_texts() -> list[str]:
    return list(Message.objects.values_list("content", flat=True))
