"""Writes behind the OpenAI-compatible API's responses: a response's input stored as the
messages its run answers, and a response taken away.

A response is a run; its input items are stored messages pointing at that run, on the
branch the run answers on, so the web UI, search, export and the admin see them as they
see any turn.
"""

from collections.abc import Sequence
from dataclasses import replace
from uuid import UUID

from django.db import transaction

from conversations import notifications
from conversations.errors import RunActive
from conversations.models import Branch, Conversation, Message, Run
from conversations.services.common import raise_if
from conversations.services.message_batches import (
    message_batch_pairing_problems,
    message_batch_problems,
)
from conversations.services.messages import (
    NewMessage,
    branch_target,
    first_filename,
    messages_append,
    messages_files,
    stored_payload,
)
from conversations.services.quotas import message_quota_take
from conversations.validation import title_from_message


def response_input_store(
    *,
    conversation: Conversation,
    locked: Conversation,
    messages: Sequence[NewMessage],
    branch: Branch | None,
    run_id: UUID,
) -> tuple[Branch, list[Message]]:
    """Inside the transaction that starts the run (the conversation locked as `locked`):
    `messages` appended to `branch` (the active one for None), each pointing at the run,
    and that branch made the conversation's active one. Each tool result must answer a
    call still open on that path or made before it in `messages` (ValidationFailed). Each
    user message counts against the owner's daily quota (QuotaExceeded), an input of none
    as one; the first names an untitled conversation."""
    raise_if(message_batch_problems(messages))
    target = branch if branch is not None else branch_target(locked=locked, branch_id=None)
    raise_if(message_batch_pairing_problems(branch=target, messages=messages))
    # The run makes the model work even when its input holds no user message (tool
    # outputs, an instruction alone): that counts as one turn.
    turns = sum(1 for new in messages if new.role == Message.Role.USER)
    for _ in range(max(turns, 1)):
        message_quota_take(user_id=conversation.owner_id)
    rows = messages_append(
        conversation=conversation,
        messages=[_with_run(new, run_id) for new in messages],
        branch_id=target.pk,
    )
    target.message_count = max(target.message_count, rows[-1].seq if rows else 0)
    changes: dict[str, object] = {}
    first_user = next((new for new in messages if new.role == Message.Role.USER), None)
    if not locked.title and first_user is not None:
        changes["title"] = title_from_message(
            first_user.content, filename=first_filename(first_user)
        )
    if locked.active_branch_id != target.pk:
        # The conversation goes on where its client wrote last, as after a user message.
        changes["active_branch_id"] = target.pk
    if changes:
        Conversation.objects.filter(pk=conversation.pk).update(**changes)
        for name, value in changes.items():
            setattr(conversation, name, value)
            setattr(locked, name, value)
        shown = {key: str(value) for key, value in changes.items()}
        notifications.notify(conversation.pk, notifications.UPDATED, **shown)
    files = messages_files(rows=rows, messages=messages)
    for row in rows:
        notifications.notify(
            conversation.pk,
            notifications.MESSAGE_STORED,
            message=stored_payload(
                row, target, branch_count=locked.branch_count, files=files.get(row.pk, ())
            ),
        )
    return target, rows


def _with_run(new: NewMessage, run_id: UUID) -> NewMessage:
    return replace(new, run_id=run_id)


def response_delete(*, run: Run) -> None:
    """Take a response away: its run's row goes, while the messages it stored stay in
    their conversation (they are the conversation's items, as on OpenAI's API) and stop
    naming it. RunActive while it is still running: cancel it first."""
    with transaction.atomic():
        if Run.objects.filter(pk=run.pk, status__in=Run.ACTIVE_STATUSES).exists():
            raise RunActive()
        Message.objects.filter(conversation_id=run.conversation_id, run_id=run.pk).update(run=None)
        Run.objects.filter(pk=run.pk).delete()
