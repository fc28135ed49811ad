"""A conversation to share: two turns, with a system prompt and a draft that no reader
of a link may see."""

from accounts.models import User
from conversations import services
from conversations.models import Conversation
from conversations.services import NewMessage

SECRET_PROMPT = "Owner's secret system prompt"
SECRET_DRAFT = "owner's unsent draft"


def chat_to_share(owner: User, *, question: str = "Why do cats purr?") -> Conversation:
    conversation = services.conversation_create(
        owner=owner, title="Cats", system_prompt=SECRET_PROMPT
    )
    services.messages_append(
        conversation=conversation,
        messages=[
            NewMessage(role="user", content=question),
            NewMessage(role="assistant", content="Mostly contentment."),
        ],
    )
    services.conversation_draft_update(conversation=conversation, draft=SECRET_DRAFT)
    conversation.refresh_from_db()
    return conversation
