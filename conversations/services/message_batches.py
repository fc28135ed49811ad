"""Messages a client gives as they are (not a turn that starts a run): a batch appended to
the active path, a conversation created holding one, and one message taken out of the
path. The OpenAI-compatible API's conversation items are written here.

They are stored messages, so everything else (the web UI, search, export, the admin,
the model's input) sees them as it sees any message. The path is append-only: taking a
message out forks a new active branch without it, and the old path stays as an
alternative, as after an edit.
"""

from collections.abc import Iterator, Sequence
from typing import Any
from uuid import UUID

from django.db import transaction
from django.utils import timezone

from accounts.models import User
from conversations import notifications, validation
from conversations.errors import Problem, RunActive
from conversations.models import Branch, Conversation, Message, Run
from conversations.selectors.branches import (
    branch_active,
    path_call_rows,
    path_open_calls,
    path_querysets,
    segment_owning,
)
from conversations.services.attachments import attachments_copy
from conversations.services.branches import branch_fork, branch_switch
from conversations.services.common import raise_if
from conversations.services.compactions import compaction_shifted
from conversations.services.conversations import conversation_create
from conversations.services.forks import BULK_BATCH, COPIED_FIELDS
from conversations.services.messages import (
    NewMessage,
    branch_target,
    conversation_lock,
    first_filename,
    messages_append,
    messages_files,
    stored_payload,
)
from conversations.services.quotas import message_quota_take
from conversations.tool_pairing import OpenCalls
from conversations.validation import title_from_message


def message_batch_problems(messages: Sequence[NewMessage]) -> list[Problem]:
    """The rules every stored message keeps, checked here too so no caller can skip them
    (the API checks first, naming each item's own path)."""
    problems: list[Problem] = []
    for index, new in enumerate(messages):
        path = f"$.messages[{index}]"
        problems += validation.content_problems(new.content, path=f"{path}.content")
        if new.role == Message.Role.TOOL and not new.tool_call_id:
            problems.append(Problem(f"{path}.tool_call_id", "must not be empty"))
        if new.attachments and new.role != Message.Role.USER:
            problems.append(Problem(f"{path}.attachments", "only a user's message carries files"))
        problems += validation.text_problems(
            new.tool_call_id, path=f"{path}.tool_call_id", max_chars=validation.TOOL_CALL_ID_MAX
        )
        problems += validation.text_problems(
            new.name, path=f"{path}.name", max_chars=validation.TOOL_NAME_MAX
        )
        for number, call in enumerate(new.tool_calls):
            for key, limit in (
                ("id", validation.TOOL_CALL_ID_MAX),
                ("name", validation.TOOL_NAME_MAX),
            ):
                problems += validation.text_problems(
                    call.get(key), path=f"{path}.tool_calls[{number}].{key}", max_chars=limit
                )
            problems += validation.content_problems(
                call.get("arguments"), path=f"{path}.tool_calls[{number}].arguments"
            )
    return problems


def _touches_calls(messages: Sequence[NewMessage]) -> bool:
    return any(
        new.tool_calls or new.tool_call_id or new.role == Message.Role.TOOL for new in messages
    )


def _calls_read(calls: OpenCalls, messages: Sequence[NewMessage], *, path: str) -> list[Problem]:
    problems: list[Problem] = []
    for index, new in enumerate(messages):
        problems += calls.read(
            role=new.role,
            call_ids=[str(call.get("id") or "") for call in new.tool_calls],
            tool_call_id=new.tool_call_id,
            path=f"{path}[{index}]",
        )
    return problems


def message_batch_pairing_problems(
    *, branch: Branch | None, messages: Sequence[NewMessage], last: int | None = None
) -> list[Problem]:
    """`messages` appended after seq `last` of `branch`'s path (its end for None; no path
    at all for no branch) under the rule every stored path keeps (tool_pairing.py): each
    tool result answers a call still open there or made before it in `messages`. The
    path is read only for a batch that calls tools or answers calls."""
    if not _touches_calls(messages):
        return []
    calls = (
        OpenCalls()
        if branch is None
        else path_open_calls(branch, last=branch.message_count if last is None else last)
    )
    return _calls_read(calls, messages, path="$.messages")


def _run_active(conversation: Conversation) -> bool:
    return Run.objects.filter(conversation=conversation, status__in=Run.ACTIVE_STATUSES).exists()


def message_batch_append(
    *, conversation: Conversation, messages: Sequence[NewMessage]
) -> list[Message]:
    """Append messages to the active branch, all or none, in one transaction.

    As over the REST API: a system message is a context event and may arrive while a reply
    is being generated; anything else would land in the middle of that reply's turn, so it
    is refused (RunActive) until the run ends. Each user message counts against the
    owner's daily message quota (QuotaExceeded), and the first names an untitled
    conversation.
    """
    raise_if(message_batch_problems(messages))
    if not messages:
        return []
    with transaction.atomic():
        locked = conversation_lock(conversation)
        turns = [new for new in messages if new.role != Message.Role.SYSTEM]
        if turns and _run_active(conversation):
            raise RunActive()
        if _touches_calls(messages):
            raise_if(
                message_batch_pairing_problems(
                    branch=branch_target(locked=locked, branch_id=None), messages=messages
                )
            )
        for new in turns:
            if new.role == Message.Role.USER:
                message_quota_take(user_id=conversation.owner_id)
        rows = messages_append(conversation=conversation, messages=messages)
        first_user = next((new for new in turns if new.role == Message.Role.USER), None)
        if not locked.title and first_user is not None:
            title = title_from_message(first_user.content, filename=first_filename(first_user))
            Conversation.objects.filter(pk=conversation.pk).update(title=title)
            conversation.title = title
            notifications.notify(conversation.pk, notifications.UPDATED, title=title)
        branch = branch_target(locked=locked, branch_id=None)
        files = messages_files(rows=rows, messages=messages)
        for row in rows:
            notifications.notify(
                conversation.pk,
                notifications.MESSAGE_STORED,
                message=stored_payload(
                    row, branch, branch_count=locked.branch_count, files=files.get(row.pk, ())
                ),
            )
    return rows


def conversation_create_with_messages(
    *, owner: User, metadata: dict[str, str] | None, messages: Sequence[NewMessage]
) -> tuple[Conversation, list[Message]]:
    """A new conversation holding `messages`: both or neither (a refused item, or a quota
    reached, leaves no empty conversation behind)."""
    with transaction.atomic():
        conversation = conversation_create(owner=owner, metadata=metadata)
        rows = message_batch_append(conversation=conversation, messages=messages)
    return conversation, rows


def _copies(
    *,
    conversation: Conversation,
    branch: Branch,
    rows: Iterator[dict[str, Any]],
    shift: int,
    removed: int | None = None,
) -> int:
    """Insert copies of path rows on `branch`, `shift` seqs earlier, with the files of
    those that had any; how many. `removed`: the seq of the message left out before them."""
    count = 0
    batch: list[Message] = []
    copies: dict[UUID, UUID] = {}
    for row in rows:
        original = row.pop("id", None)
        if removed is not None and row.get("kind") == Message.Kind.COMPACTION:
            # The turns it covers moved up with it, or the one it ended on left the path.
            row["provider_payload"] = compaction_shifted(
                row.get("provider_payload"), removed_seq=removed
            )
        copy = Message(
            conversation_id=conversation.pk,
            branch_id=branch.pk,
            copied=True,
            **{**row, "seq": row["seq"] - shift},
        )
        if original is not None:
            copies[original] = copy.pk
        batch.append(copy)
        if len(batch) >= BULK_BATCH:
            Message.objects.bulk_create(batch)
            count, batch = count + len(batch), []
    if batch:
        Message.objects.bulk_create(batch)
        count += len(batch)
    attachments_copy(conversation_id=conversation.pk, copies=copies)
    return count


def message_replace(
    *, conversation: Conversation, message: Message, replacement: NewMessage | None
) -> Branch:
    """The active path with `message` replaced by `replacement`, or left out for None, as
    a new branch that becomes active.

    Stored messages never change: the new branch forks just before `message`, holds the
    replacement and copies of the messages that followed it (new ids, the same times,
    marked as copies so the usage dashboard does not count them twice), and the old path
    stays as an alternative. Costs one row per message after `message`. Refused
    (RunActive) while a reply is being generated, as switching branches is;
    Message.DoesNotExist when `message` is not on the active path.
    """
    if replacement is not None:
        raise_if(message_batch_problems([replacement]))
    with transaction.atomic():
        locked = conversation_lock(conversation)
        if _run_active(conversation):
            raise RunActive()
        source = branch_active(conversation=locked)
        if (
            message.seq > source.message_count
            or segment_owning(source, message.seq).branch_id != message.branch_id
        ):
            raise Message.DoesNotExist
        raise_if(_replace_pairing_problems(source=source, message=message, replacement=replacement))
        branch = branch_fork(conversation=conversation, source=source, fork_seq=message.seq - 1)
        kept = 0
        if replacement is not None:
            kept = _copies(
                conversation=conversation,
                branch=branch,
                shift=0,
                rows=iter([_replacement_row(message, replacement)]),
            )
        tail = path_querysets(source, after=message.seq, last=source.message_count)
        kept += _copies(
            conversation=conversation,
            branch=branch,
            # Without a replacement the rest moves up one seq, into the gap.
            shift=0 if replacement is not None else 1,
            removed=None if replacement is not None else message.seq,
            rows=(
                row
                for part in tail
                for row in part.values("id", *COPIED_FIELDS).iterator(chunk_size=BULK_BATCH)
            ),
        )
        branch.message_count = branch.fork_seq + kept
        Branch.objects.filter(pk=branch.pk).update(message_count=branch.message_count)
        now = timezone.now()
        Conversation.objects.filter(pk=conversation.pk).update(
            message_count=locked.message_count + kept, last_activity_at=now
        )
        conversation.message_count = locked.message_count + kept
        conversation.last_activity_at = now
        branch_switch(conversation=conversation, branch_id=branch.pk)
    return branch


def _as_new(message: Message) -> NewMessage:
    return NewMessage(
        role=message.role, tool_calls=message.tool_calls, tool_call_id=message.tool_call_id
    )


def _replace_pairing_problems(
    *, source: Branch, message: Message, replacement: NewMessage | None
) -> list[Problem]:
    """The path with `message` replaced must keep the tool-call rule where it held: a
    result after it must not lose its call. Problems the path already had (rows stored
    before the rule held) are left aside."""
    changed = [replacement] if replacement is not None else []
    if not _touches_calls([_as_new(message), *changed]):
        return []
    before = path_open_calls(source, last=message.seq - 1)
    tail = list(path_call_rows(source, after=message.seq, last=source.message_count))

    def found(calls: OpenCalls, head: list[NewMessage]) -> list[Problem]:
        problems = _calls_read(calls, head, path="$.replacement")
        for index, (role, call_ids, answered) in enumerate(tail):
            problems += calls.read(
                role=role, call_ids=call_ids, tool_call_id=answered, path=f"$.after[{index}]"
            )
        return problems

    had = set(found(before.copy(), [_as_new(message)]))
    new = [problem for problem in found(before, changed) if problem not in had]
    if not new:
        return []
    return [
        Problem(
            "$",
            f"taking it out would leave a later tool call or result unpaired ({new[0].message}); "
            "take that one out first",
        )
    ]


def _replacement_row(message: Message, new: NewMessage) -> dict[str, Any]:
    return {
        "seq": message.seq,
        "role": new.role,
        "kind": new.kind,
        "content": new.content,
        "tool_calls": new.tool_calls,
        "tool_call_id": new.tool_call_id,
        "name": new.name,
        "usage": new.usage,
        "provider_payload": new.provider_payload,
        "created_at": new.created_at or message.created_at,
        "reasoning": new.reasoning,
        "reasoning_ms": new.reasoning_ms,
    }
