"""`POST chat/`: one call that creates a conversation or continues one."""

from uuid import UUID

from django.db import transaction

from accounts.models import User
from conversations import selectors, validation
from conversations.errors import Problem, ValidationFailed
from conversations.models import Conversation, Message, Run
from conversations.services.common import raise_if
from conversations.services.conversations import conversation_create
from conversations.services.runs import run_start


def chat_start(
    *, user: User, message: str, conversation_id: UUID | str | None = None
) -> tuple[Conversation, Message, Run]:
    """Start a run for `message`: in the user's conversation `conversation_id`, or in a new
    conversation when it is None (its title comes from the message). The model then sees
    the conversation's whole stored history, as for any turn.

    All or nothing: a refused message leaves no empty conversation behind. Raises
    Conversation.DoesNotExist for an id that is not the user's, Conflict while a run of
    the conversation is active.
    """
    raise_if(validation.content_problems(message, path="$.message"))
    if not message.strip():
        raise ValidationFailed([Problem("$.message", "must not be empty")])
    with transaction.atomic():
        if conversation_id is None:
            conversation = conversation_create(owner=user)
        else:
            conversation = selectors.conversation_get(user=user, conversation_id=conversation_id)
        stored, run = run_start(conversation=conversation, content=message)
    return conversation, stored, run
