"""The conversation's draft: the user's edits and the assistant's writes, with the user's
words winning."""

from typing import Any

from django.db import transaction
from django.utils import timezone

from conversations import notifications, validation
from conversations.errors import DraftEditedMeanwhile
from conversations.models import Conversation
from conversations.services.common import raise_if
from conversations.services.messages import conversation_lock


def conversation_draft_update(
    *,
    conversation: Conversation,
    draft: str,
    by_user: bool = True,
    call_id: str = "",
    edits_seen: int | None = None,
) -> bool:
    """Set the draft; return whether it changed.

    A change by the user raises `draft_edited` so the next turn tells the model, and counts
    in `draft_edit_count`; a change by the assistant (its `update_draft` tool) clears the
    flag, since the model wrote it. Saving an unchanged draft is a no-op and injects nothing.

    The user's words win over the assistant's. `edits_seen` is the `draft_edit_count` the
    model saw when the call that asked for this write started (Run.draft_edits_seen). If
    the user has changed the draft since, the model never saw their text: the write is
    refused with DraftEditedMeanwhile, which carries the user's draft so the model can
    reconcile. A later model call has read that draft, so its write goes through. Checked
    under the row lock, so an edit is either counted before the check or made after the
    write, never lost in between. None (the caller cannot tell) skips the check.

    `call_id` names the assistant's tool call. It is recorded in `draft_call_id` with the
    text, and also when the text was already in place: either way the call has done its
    write, and a resumed attempt must not repeat it over a later user edit. A user edit
    leaves the record as it is.
    """
    if by_user and (call_id or edits_seen is not None):
        raise ValueError("a user edit has no tool call and needs no guard")
    raise_if(
        validation.draft_problems(draft)
        + validation.text_problems(call_id, path="$.call_id", max_chars=validation.TOOL_CALL_ID_MAX)
    )
    changes: dict[str, Any] = {} if by_user else {"draft_call_id": call_id}
    with transaction.atomic():
        locked = conversation_lock(conversation)
        changed = locked.draft != draft
        if changed and edits_seen is not None and locked.draft_edit_count > edits_seen:
            raise DraftEditedMeanwhile(locked.draft)
        if changed:
            changes.update(draft=draft, draft_edited=by_user, updated_at=timezone.now())
            if by_user:
                changes["draft_edit_count"] = locked.draft_edit_count + 1
        if changes:
            Conversation.objects.filter(pk=conversation.pk).update(**changes)
        if changed:
            notifications.notify(
                conversation.pk,
                notifications.DRAFT_CHANGED,
                draft=draft,
                by="user" if by_user else "assistant",
            )
    for name, value in changes.items():
        setattr(conversation, name, value)
    return changed
