"""The admin's visitors and the conversations they look at: staff with chosen
permissions, logged-in clients, and conversations with real content."""

from django.contrib.auth.models import Permission
from django.test import Client

from accounts.models import User
from conversations import services
from conversations.models import Conversation
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
