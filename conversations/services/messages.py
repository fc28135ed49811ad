"""Appending messages and context events (the draft: services/drafts.py).

Appends go to a branch (the conversation's active one unless another is named) and
allocate `seq` from that branch's counter under a row lock on the conversation (SELECT ...
FOR UPDATE on PostgreSQL; an IMMEDIATE transaction on SQLite), so concurrent writers get
a gapless sequence along the path and the counters move in the same transaction as the
rows.
"""

import copy
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, ClassVar
from uuid import UUID

from django.db import transaction
from django.utils import timezone

from conversations import notifications, sql, validation
from conversations.context import FileInput
from conversations.errors import Problem, ValidationFailed
from conversations.models import Branch, Conversation, Message, StoredFile
from conversations.selectors.attachments import attachment_files
from conversations.selectors.branches import alternatives_at
from conversations.serializers import attachment_payload, message_payload
from conversations.services.attachments import attachment_files_resolve, attachments_store
from conversations.services.common import raise_if
from conversations.services.compactions import compaction_place
from conversations.services.quotas import message_quota_take
from conversations.services.usage import usage_increments
from conversations.validation import title_from_message


@dataclass(frozen=True)
class NewMessage:
    """A message to append; seq and conversation are assigned by the service."""

    role: str
    content: str = ""
    # Set when the id was announced before the row existed (a streamed reply's id).
    id: UUID | None = None
    kind: str = Message.Kind.MESSAGE
    tool_calls: list[dict[str, str]] = field(default_factory=list)
    tool_call_id: str = ""
    name: str = ""
    run_id: UUID | None = None
    usage: dict[str, Any] | None = None
    provider_payload: dict[str, Any] | None = None
    created_at: datetime | None = None
    # What a reasoning model thought before this reply, and for how long (milliseconds).
    reasoning: str = ""
    reasoning_ms: int | None = None
    # A user message's files: the ids of the owner's stored files it carries, in order
    # (linked when it is stored), or, for a message kept nowhere, the files as read for
    # the model (the model's input reads them as it reads a stored message's).
    attachments: tuple[UUID, ...] = ()
    files: tuple[FileInput, ...] = ()

    # The fields above that are not the row's own columns.
    BESIDES_ROW: ClassVar[frozenset[str]] = frozenset({"attachments", "files"})

    def row_values(self) -> dict[str, Any]:
        """The fields that are Message's own, by the same names."""
        return {name: value for name, value in vars(self).items() if name not in self.BESIDES_ROW}


# What `conversation_lock` re-reads: the fields appends and their notices move or read.
LOCKED_FIELDS = (
    "id",
    "owner_id",
    "message_count",
    "title",
    "draft",
    "draft_edited",
    "draft_edit_count",
    "active_branch_id",
    "branch_count",
)


def conversation_lock(conversation: Conversation) -> Conversation:
    """Re-read the conversation's mutable counters under a row lock for this transaction."""
    return Conversation.objects.select_for_update().only(*LOCKED_FIELDS).get(pk=conversation.pk)


def branch_target(*, locked: Conversation, branch_id: UUID | None) -> Branch:
    """The branch an append goes to, read under the conversation's lock so its counter is
    current: the named one (it must be this conversation's) or the active one."""
    key = branch_id or locked.active_branch_id
    if key is None:
        return Branch.objects.get(conversation_id=locked.pk, parent__isnull=True)
    return Branch.objects.get(pk=key, conversation_id=locked.pk)


def branch_advance(*, locked: Conversation, branch_id: UUID | None, by: int) -> Branch:
    """`branch_target`, with its counter moved on by the `by` messages about to be appended,
    in one statement (UPDATE ... RETURNING) instead of a read and a write. Under the
    conversation's lock, like every append; the caller inserts the messages right after
    (`_insert(..., counted=True)`). Branch.DoesNotExist for another conversation's branch."""
    # No active branch happens only for a moment while a conversation is created.
    key = branch_id or locked.active_branch_id or branch_target(locked=locked, branch_id=None).pk
    branch = sql.branch_count_advance(branch_id=key, conversation_id=locked.pk, by=by)
    if branch is None:
        raise Branch.DoesNotExist
    return branch


def _insert(
    *,
    conversation: Conversation,
    locked: Conversation,
    messages: Sequence[NewMessage],
    branch: Branch,
    changes: dict[str, Any] | None = None,
    counted: bool = False,
) -> list[Message]:
    """Insert after the branch's last seq and move the branch's and conversation's counters,
    with `changes` to the conversation in the same UPDATE. `counted`: the branch's counter
    already includes these messages (`branch_advance`)."""
    now = timezone.now()
    start = branch.message_count - len(messages) if counted else branch.message_count
    messages = compaction_place(owner=locked.owner_id, branch=branch, last=start, messages=messages)
    rows = [
        sql.message_new(
            values={
                **new.row_values(),
                "id": new.id or uuid.uuid4(),
                "conversation_id": conversation.pk,
                "branch_id": branch.pk,
                "seq": start + offset + 1,
                "created_at": new.created_at or now,
            }
        )
        for offset, new in enumerate(messages)
    ]
    end, total = start + len(rows), locked.message_count + len(rows)
    counters = {"message_count": total, "last_activity_at": now}
    sql.messages_append_write(
        messages=rows,
        # In the same transaction: the usage dashboard counts exactly what was stored.
        usage=usage_increments(
            owner_id=locked.owner_id, conversation_id=conversation.pk, messages=rows
        ),
        branch_count=None if counted else (branch.pk, end),
        conversation_id=conversation.pk,
        conversation_values={**counters, **(changes or {})},
    )
    branch.message_count = end
    locked.message_count = conversation.message_count = total
    conversation.last_activity_at = now
    for name, value in (changes or {}).items():
        setattr(conversation, name, value)
        setattr(locked, name, value)
    return rows


def messages_append(
    *,
    conversation: Conversation,
    messages: Sequence[NewMessage],
    branch_id: UUID | None = None,
) -> list[Message]:
    """Append messages in order to a branch (the active one by default), atomically: all
    get consecutive seqs along its path or none is stored. The files a user's message
    carries (`NewMessage.attachments`) are linked to it: StoredFile.DoesNotExist when one
    is not the owner's, ValidationFailed past the per-message limit."""
    if not messages:
        return []
    # No savepoint of its own inside a caller's transaction (a worker storing a reply):
    # a failure here fails the caller's whole transaction anyway.
    with transaction.atomic(savepoint=False):
        locked = conversation_lock(conversation)
        files = [
            attachment_files_resolve(
                owner_id=locked.owner_id, file_ids=[str(key) for key in new.attachments]
            )
            if new.attachments
            else []
            for new in messages
        ]
        branch = branch_advance(locked=locked, branch_id=branch_id, by=len(messages))
        rows = _insert(
            conversation=conversation,
            locked=locked,
            messages=messages,
            branch=branch,
            counted=True,
        )
        for row, carried in zip(rows, files, strict=True):
            attachments_store(message=row, files=carried)
        return rows


def first_filename(message: NewMessage) -> str:
    """The name of the first file a message carries ("" when none), for a title: read only
    when the message says nothing else."""
    if message.content.strip() or not message.attachments:
        return ""
    names = StoredFile.objects.filter(pk=message.attachments[0]).values_list("filename", flat=True)
    return names.first() or ""


def messages_files(
    *, rows: Sequence[Message], messages: Sequence[NewMessage]
) -> dict[UUID, list[StoredFile]]:
    """The files `messages_append` linked to `rows` (stored from `messages`), by message id,
    for their payloads: one query, and none when no message carries a file."""
    carrying = [row.pk for row, new in zip(rows, messages, strict=True) if new.attachments]
    return attachment_files(message_ids=carrying)


def message_append(
    *, conversation: Conversation, message: NewMessage, branch_id: UUID | None = None
) -> Message:
    return messages_append(conversation=conversation, messages=[message], branch_id=branch_id)[0]


def stored_payload(
    row: Message,
    branch: Branch,
    *,
    branch_count: int | None,
    files: Sequence[StoredFile] = (),
) -> dict[str, Any]:
    """A message just stored (with `files` attached), as clients see it. Only a branch's
    first message can have alternatives at birth (it was made by an edit or a
    regeneration), so only it costs a query."""
    first = row.seq == branch.fork_seq + 1 and (branch.parent_id is not None or row.seq == 1)
    if first and branch.message_count < row.seq:
        # A branch read before the append: its path now reaches this message.
        branch = copy.copy(branch)
        branch.message_count = row.seq
    choices = (
        alternatives_at(branch, [row.seq], branch_count=branch_count).get(row.seq)
        if first
        else None
    )
    return message_payload(
        row, alternatives=choices, attachments=[attachment_payload(file) for file in files]
    )


def content_checked(content: str, *, attachments: Any = None) -> None:
    """The text of a message; it may be empty when files are attached (`attachments`,
    the ids the client sent)."""
    raise_if(validation.content_problems(content))
    if not content.strip() and not (isinstance(attachments, list) and attachments):
        raise ValidationFailed(
            [Problem("$.content", "must not be empty (unless files are attached)")]
        )


def user_turn_insert(
    *,
    conversation: Conversation,
    locked: Conversation,
    branch: Branch,
    content: str,
    notice_after: bool = False,
    run_id: UUID | None = None,
    counted: bool = False,
    attachments: Any = None,
) -> Message:
    """The user's message on `branch` with a due draft-edit notice, inside the caller's
    transaction and lock. The notice goes before the message, or after it for an edit,
    whose message must open its branch so it sits beside the text it replaces. `run_id`:
    the run the message starts, made right after it in the same transaction. `counted`:
    `branch_advance` already counted the turn (`user_turn_size`) on the branch.
    `attachments`: the ids of the owner's files to put in the message, in order
    (`attachment_files_resolve` says what is refused)."""
    files = attachment_files_resolve(owner_id=conversation.owner_id, file_ids=attachments)
    message_quota_take(user_id=conversation.owner_id)
    user = NewMessage(role=Message.Role.USER, content=content, run_id=run_id)
    new = [user]
    if locked.draft_edited:
        notice = NewMessage(
            role=Message.Role.SYSTEM,
            kind=Message.Kind.DRAFT_EDIT,
            content=draft_edit_notice(locked.draft),
        )
        new = [user, notice] if notice_after else [notice, user]
    changes: dict[str, Any] = {}
    if locked.draft_edited:
        changes["draft_edited"] = False
    if not locked.title:
        changes["title"] = title_from_message(content, filename=files[0].filename if files else "")
    if locked.active_branch_id != branch.pk:
        # The conversation goes on where its user wrote last.
        changes["active_branch_id"] = branch.pk
    # One UPDATE of the conversation: its counters and these changes together.
    rows = _insert(
        conversation=conversation,
        locked=locked,
        messages=new,
        branch=branch,
        changes=changes,
        counted=counted,
    )
    stored = next(row for row in rows if row.role == Message.Role.USER)
    attachments_store(message=stored, files=files)
    shown: dict[str, Any] = {}
    if "title" in changes:
        shown["title"] = changes["title"]
    if "active_branch_id" in changes:
        shown["active_branch_id"] = str(branch.pk)
    if shown:
        notifications.notify(conversation.pk, notifications.UPDATED, **shown)
    for row in rows:
        notifications.notify(
            conversation.pk,
            notifications.MESSAGE_STORED,
            message=stored_payload(
                row,
                branch,
                branch_count=locked.branch_count,
                files=files if row is stored else (),
            ),
        )
    return stored


def user_message_append(
    *,
    conversation: Conversation,
    content: str,
    branch_id: UUID | None = None,
    attachments: Any = None,
) -> Message:
    """Store the user's next message on a branch (the active one by default; a named one
    becomes active), preceded by a draft-edit notice if one is due.

    The notice (`[user edited the draft to: "..."]`) tells the model *that* the user changed
    the draft and *to what*; it is stored once per edit, so the model never sees a stale one.
    The first user message also names an untitled conversation. Raises QuotaExceeded
    when the owner's daily message quota is used up, Branch.DoesNotExist for a branch of
    another conversation (nothing is stored then).
    """
    content_checked(content, attachments=attachments)
    with transaction.atomic():
        locked = conversation_lock(conversation)
        return user_message_store(
            conversation=conversation,
            locked=locked,
            content=content,
            branch_id=branch_id,
            attachments=attachments,
        )


def user_message_store(
    *,
    conversation: Conversation,
    locked: Conversation,
    content: str,
    branch_id: UUID | None = None,
    run_id: UUID | None = None,
    attachments: Any = None,
) -> Message:
    """`user_message_append` inside the caller's transaction and lock (checked content):
    the branch's counter moved and read in one statement, then the turn."""
    # The user's message, and a due draft notice (see user_turn_insert).
    size = 2 if locked.draft_edited else 1
    branch = branch_advance(locked=locked, branch_id=branch_id, by=size)
    return user_turn_insert(
        conversation=conversation,
        locked=locked,
        branch=branch,
        content=content,
        run_id=run_id,
        counted=True,
        attachments=attachments,
    )


def context_event_add(*, conversation: Conversation, content: str) -> Message:
    """Store a context event (a system message that starts no run) on the active branch."""
    content_checked(content)
    with transaction.atomic():
        locked = conversation_lock(conversation)
        branch = branch_target(locked=locked, branch_id=None)
        event = _insert(
            conversation=conversation,
            locked=locked,
            branch=branch,
            messages=[
                NewMessage(role=Message.Role.SYSTEM, kind=Message.Kind.EVENT, content=content)
            ],
        )[0]
        notifications.notify(
            conversation.pk,
            notifications.MESSAGE_STORED,
            message=stored_payload(event, branch, branch_count=locked.branch_count),
        )
    return event


def draft_edit_notice(draft: str) -> str:
    return f'[user edited the draft to: "{draft}"]'
