"""Edits and regenerations: a new branch and the run that answers on it, in one
transaction (services/branches.py makes the branch, runs.run_begin the run)."""

from typing import Any
from uuid import UUID

from conversations import selectors
from conversations.engine.runs import run_begin
from conversations.models import Branch, Conversation, Message, Run
from conversations.services import message_edit_prepare, reply_regenerate_prepare


def reply_regenerate(
    *, conversation: Conversation, message_id: UUID | str, client_id: str = ""
) -> tuple[Branch, Run]:
    """Answer again the turn that produced an assistant reply, on a new active branch.
    Message.DoesNotExist for an id not in this conversation; RunActive while a run is
    active; ValidationFailed for a message that is not an assistant reply."""
    message = selectors.message_get(conversation=conversation, message_id=message_id)

    def prepare(locked: Conversation, run_id: UUID) -> tuple[Branch, Message, Message | None]:
        branch, trigger = reply_regenerate_prepare(
            conversation=conversation, message=message, locked=locked
        )
        return branch, trigger, None

    branch, _, run = run_begin(conversation=conversation, client_id=client_id, prepare=prepare)
    return branch, run


def message_edit(
    *,
    conversation: Conversation,
    message_id: UUID | str,
    content: str,
    client_id: str = "",
    attachments: Any = None,
) -> tuple[Branch, Message, Run]:
    """Ask again with new text: a new active branch forked before a user message, the
    edited text (with the files `attachments` names) its first message, and a run
    answering it."""
    message = selectors.message_get(conversation=conversation, message_id=message_id)

    def prepare(locked: Conversation, run_id: UUID) -> tuple[Branch, Message, Message | None]:
        branch, edited = message_edit_prepare(
            conversation=conversation,
            message=message,
            content=content,
            locked=locked,
            run_id=run_id,
            attachments=attachments,
        )
        return branch, edited, edited

    branch, edited, run = run_begin(conversation=conversation, client_id=client_id, prepare=prepare)
    if edited is None:
        # A repeat of an edit (same client_id): the message it stored then.
        assert run.trigger_message_id is not None
        edited = Message.objects.get(pk=run.trigger_message_id, conversation=conversation)
    return branch, edited, run
