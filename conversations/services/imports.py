"""Imports: a conversation stored from an export document, a minimal one or a chat
fine-tuning line (formats/importing.py), everything or nothing, its branches as the
same tree with new ids."""

import uuid
from collections import Counter
from datetime import timedelta
from typing import Any
from uuid import UUID

from django.db import transaction

from accounts.models import User
from conversations.formats.importing import ParsedExport, parse_export
from conversations.models import AuditEvent, Branch, Conversation, Message
from conversations.services.audit import audit_record
from conversations.services.forks import BULK_BATCH, messages_bulk_insert
from conversations.services.quotas import conversation_quota_check


def conversation_import(*, owner: User, document: bytes | str) -> Conversation:
    """Store a conversation for `owner` from an export, a minimal document or a chat
    fine-tuning line (formats/importing.py): everything or nothing. A tree of branches
    comes back as the same tree, with new ids, and the same branch active.

    Raises ValidationFailed listing every problem, each with its JSON path.
    """
    parsed = parse_export(document)
    data = parsed.conversation
    # Version 1 exports and the short forms carry no generation settings or reasoning.
    settings = {
        "temperature": getattr(data, "temperature", None),
        "max_output_tokens": getattr(data, "max_output_tokens", None),
    }
    last_times = [m.created_at for m in parsed.messages]
    with transaction.atomic():
        conversation_quota_check(owner_id=owner.pk)
        conversation = Conversation.objects.create(
            owner=owner,
            title=data.title,
            system_prompt=data.system_prompt,
            model=data.model,
            tools=data.tools,
            metadata=data.metadata,
            draft=data.draft,
            created_at=data.created_at,
            updated_at=data.updated_at,
            last_activity_at=max([data.updated_at, *last_times]),
            message_count=len(parsed.messages),
            **settings,
        )
        branch_ids = _branches_store(conversation, parsed)
        messages_bulk_insert(
            Message(
                conversation=conversation,
                branch_id=branch_ids.get(getattr(m, "branch_id", None), branch_ids[None]),
                seq=m.seq,
                role=m.role,
                kind=m.kind,
                content=m.content,
                reasoning=getattr(m, "reasoning", ""),
                reasoning_ms=getattr(m, "reasoning_ms", None),
                tool_calls=[call.model_dump() for call in m.tool_calls],
                tool_call_id=m.tool_call_id or "",
                name=m.name or "",
                usage=m.usage,
                created_at=m.created_at,
                provider_payload=m.provider_payload,
                copied=True,
            )
            for m in parsed.messages
        )
        audit_record(actor=owner, action=AuditEvent.Action.IMPORTED, conversation=conversation)
    return conversation


def _branches_store(conversation: Conversation, parsed: ParsedExport) -> dict[UUID | None, UUID]:
    """The document's branches as new rows: its id -> the stored id (None: the root).

    The root is the one the conversation was born with; the others keep their fork
    points and times, and the document's active branch stays active.
    """
    root = conversation.active_branch_id
    assert root is not None
    own = Counter(getattr(m, "branch_id", None) for m in parsed.messages)
    if not parsed.branches:
        Branch.objects.filter(pk=root).update(message_count=len(parsed.messages))
        return {None: root}
    first = parsed.branches[0]
    ids: dict[UUID | None, UUID] = {None: root, first.id: root}
    lineages: dict[UUID, list[list[Any]]] = {root: []}
    Branch.objects.filter(pk=root).update(message_count=own[first.id], created_at=first.created_at)
    rows = []
    # Exports list branches by depth then creation time: equal times (documents written
    # elsewhere) are moved a microsecond apart, so the document's order survives.
    taken = {first.created_at}
    for branch in parsed.branches[1:]:
        created = branch.created_at
        while created in taken:
            created += timedelta(microseconds=1)
        taken.add(created)
        parent = ids[branch.parent_id]
        new = Branch(
            id=uuid.uuid4(),
            conversation=conversation,
            parent_id=parent,
            fork_seq=branch.fork_seq,
            message_count=branch.fork_seq + own[branch.id],
            lineage=[*lineages[parent], [str(parent), branch.fork_seq]],
            created_at=created,
        )
        ids[branch.id] = new.id
        lineages[new.id] = new.lineage
        rows.append(new)
    Branch.objects.bulk_create(rows, batch_size=BULK_BATCH)
    active = ids.get(parsed.active_branch_id, root)
    Conversation.objects.filter(pk=conversation.pk).update(
        active_branch_id=active, branch_count=len(parsed.branches)
    )
    conversation.active_branch_id = active
    conversation.branch_count = len(parsed.branches)
    return ids
