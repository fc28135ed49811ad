"""Branches: forking a path for an edit or a regeneration, and switching between them.

Append-only: a new branch is one row, the old messages stay unchanged on their branch.
The runs that edits and regenerations start are the engine's (engine/branching.py);
these are the writes they make first, inside the engine's transaction.
"""

from typing import Any
from uuid import UUID

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from conversations import notifications
from conversations.errors import Problem, RunActive, ValidationFailed
from conversations.models import Branch, Conversation, Message, Run
from conversations.selectors.branches import branch_get, branch_segments, path_last
from conversations.serializers import branch_payload
from conversations.services.messages import content_checked, conversation_lock, user_turn_insert
from conversations.services.quotas import message_quota_take


def _lineage_until(branch: Branch, owner: UUID) -> list[list[Any]]:
    """The lineage of `owner`, an ancestor of `branch` or the branch itself."""
    if owner == branch.pk:
        return list(branch.lineage)
    for index, (ancestor, _) in enumerate(branch.lineage):
        if UUID(str(ancestor)) == owner:
            return list(branch.lineage[:index])
    raise ValueError(f"{owner} is not on the path of {branch.pk}")


def branch_fork(*, conversation: Conversation, source: Branch, fork_seq: int) -> Branch:
    """A new branch sharing the first `fork_seq` messages of `source`'s path.

    Its parent is the branch that owns the message at `fork_seq` on that path (the root
    for 0), so the messages that follow the fork point on the parent and on each of its
    children forked there are alternatives of one another. Writes one row.
    """
    if not 0 <= fork_seq <= source.message_count:
        raise ValidationFailed(
            [Problem("$.fork_seq", f"must be between 0 and {source.message_count}")]
        )
    if fork_seq == 0:
        owner = UUID(str(source.lineage[0][0])) if source.lineage else source.pk
    else:
        owner = next(
            s.branch_id for s in branch_segments(source) if s.fork_seq < fork_seq <= s.last
        )
    branch = Branch.objects.create(
        conversation=conversation,
        parent_id=owner,
        fork_seq=fork_seq,
        message_count=fork_seq,
        lineage=[*_lineage_until(source, owner), [str(owner), fork_seq]],
    )
    Conversation.objects.filter(pk=conversation.pk).update(branch_count=F("branch_count") + 1)
    conversation.branch_count += 1
    notifications.notify(
        conversation.pk,
        notifications.BRANCH_CREATED,
        branch=branch_payload(
            {
                "id": branch.pk,
                "parent_id": branch.parent_id,
                "fork_seq": branch.fork_seq,
                "created_at": branch.created_at,
                "message_count": branch.message_count,
            }
        ),
    )
    return branch


def _no_active_run(conversation: Conversation) -> None:
    if Run.objects.filter(conversation=conversation, status__in=Run.ACTIVE_STATUSES).exists():
        raise RunActive()


def _activate(conversation: Conversation, branch: Branch) -> None:
    Conversation.objects.filter(pk=conversation.pk).update(
        active_branch_id=branch.pk, updated_at=timezone.now()
    )
    conversation.active_branch_id = branch.pk
    notifications.notify(conversation.pk, notifications.UPDATED, active_branch_id=str(branch.pk))


def branch_switch(*, conversation: Conversation, branch_id: UUID | str) -> Branch:
    """Show another branch. Refused (RunActive) while a reply is being generated, since
    that reply belongs to the branch shown; Branch.DoesNotExist for another
    conversation's branch."""
    with transaction.atomic():
        conversation_lock(conversation)
        branch = branch_get(conversation=conversation, branch_id=branch_id)
        if branch.pk != conversation.active_branch_id:
            _no_active_run(conversation)
            _activate(conversation, branch)
    return branch


def _turn_start(message: Message) -> Message:
    """The user message whose turn produced `message`: its run's trigger when it has one
    on the same path, else the nearest user message before it (imported replies)."""
    if message.run_id is not None:
        run = Run.objects.filter(pk=message.run_id).select_related("trigger_message").first()
        trigger = run.trigger_message if run is not None else None
        if trigger is not None and trigger.seq < message.seq:
            owner = next(
                s.branch_id
                for s in branch_segments(message.branch)
                if s.fork_seq < trigger.seq <= s.last
            )
            if owner == trigger.branch_id:
                return trigger
    # The nearest user message before it: the turn's start is near.
    found = path_last(
        message.branch,
        at_most=message.seq - 1,
        role=Message.Role.USER,
        kind=Message.Kind.MESSAGE,
    )
    if found is not None:
        return found
    raise ValidationFailed([Problem("$.message_id", "no user message comes before this reply")])


def reply_regenerate_prepare(
    *, conversation: Conversation, message: Message, locked: Conversation | None = None
) -> tuple[Branch, Message]:
    """The new branch for regenerating `message` (an assistant reply), forked right after
    the user message that asked for it, now active. Returns it with that user message,
    which the engine's run answers. Call inside a transaction that starts the run;
    `locked`: the conversation's row that transaction already locked, having found no
    active run (the engine's run start does both in one statement)."""
    if message.role != Message.Role.ASSISTANT or message.kind != Message.Kind.MESSAGE:
        raise ValidationFailed(
            [Problem("$.message_id", "only an assistant reply can be regenerated")]
        )
    if locked is None:
        conversation_lock(conversation)
        _no_active_run(conversation)
    trigger = _turn_start(message)
    # Another answer makes the model work as a new message does: it counts as one.
    message_quota_take(user_id=conversation.owner_id)
    branch = branch_fork(conversation=conversation, source=message.branch, fork_seq=trigger.seq)
    _activate(conversation, branch)
    return branch, trigger


def message_edit_prepare(
    *,
    conversation: Conversation,
    message: Message,
    content: str,
    locked: Conversation | None = None,
    run_id: UUID | None = None,
    attachments: Any = None,
) -> tuple[Branch, Message]:
    """A new active branch forked just before `message` (a user message) whose first
    message is the edited text, with the files `attachments` names. Call inside a
    transaction that starts the run; `locked` as for `reply_regenerate_prepare`, `run_id`
    the run the edited message starts."""
    if message.role != Message.Role.USER or message.kind != Message.Kind.MESSAGE:
        raise ValidationFailed([Problem("$.message_id", "only a user message can be edited")])
    content_checked(content, attachments=attachments)
    if locked is None:
        locked = conversation_lock(conversation)
        _no_active_run(conversation)
    branch = branch_fork(conversation=conversation, source=message.branch, fork_seq=message.seq - 1)
    # Counted on the row by the fork: the locked copy must agree, or the edited message's
    # notification would take a first edit's conversation for one without alternatives.
    locked.branch_count += 1
    edited = user_turn_insert(
        conversation=conversation,
        locked=locked,
        branch=branch,
        content=content,
        notice_after=True,
        run_id=run_id,
        attachments=attachments,
    )
    return branch, edited
