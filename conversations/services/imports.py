"""Imports: a conversation stored from an export document, a minimal one or a chat
fine-tuning line (formats/importing.py), or a ZIP export with the files its messages
carry (formats/bundles.py), everything or nothing, its branches as the same tree with
new ids and its messages linked to the importing user's files (services/import_files.py),
pinned, tagged and filed as its document says (services/import_organising.py).

A large document is stored in batches, each its own short transaction, so no other
writer waits long behind an import (SQLite has one write lock for the whole database).
Until the last batch the conversation is hidden (`Conversation.import_started_at` is
set: `Conversation.objects` leaves it out); an import that fails deletes what it stored,
and one whose process died is deleted by `imports_abandoned_delete`.
"""

import logging
import uuid
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import IO, Any
from uuid import UUID

from django.db import DatabaseError, transaction
from django.utils import timezone

from accounts.models import User
from config.log_context import exception_for_log
from conversations.formats.bundles import Bundle
from conversations.formats.importing import ImportedMessage, ParsedExport, parse_export
from conversations.models import Attachment, AuditEvent, Branch, Conversation, Message, StoredFile
from conversations.services.attachments import files_attached_mark
from conversations.services.audit import audit_record
from conversations.services.files import files_discard, files_release
from conversations.services.import_files import (
    import_files_named,
    import_files_owned,
    import_files_unpack,
)
from conversations.services.import_organising import import_organise, import_organising_check
from conversations.services.quotas import conversation_quota_check

log = logging.getLogger(__name__)

# What one transaction of an import writes at most: rows of each table, and links of
# the branches' chains (Branch.lineage), which a deeply nested tree makes long.
BATCH_ROWS = 500
BATCH_LINKS = 20_000
# An import still hidden this long after it started was abandoned (its process died).
ABANDONED_AFTER = timedelta(hours=1)


def conversation_import(*, owner: User, document: bytes | str) -> Conversation:
    """Store a conversation for `owner` from an export, a minimal document or a chat
    fine-tuning line (formats/importing.py): everything or nothing. A tree of branches
    comes back as the same tree, with new ids, and the same branch active. The files its
    messages carry must be the owner's already (by sha256): services/import_files.py.

    Raises ValidationFailed listing every problem, each with its JSON path.
    """
    parsed = parse_export(document)
    files = import_files_named(parsed)
    import_files_owned(owner=owner, files=files)
    return _parsed_store(owner, parsed, files.found)


def conversation_import_bundle(*, owner: User, archive: IO[bytes]) -> Conversation:
    """Store a conversation for `owner` from a ZIP export (formats/bundles.py): its
    document as conversation_import does, the files its messages carry from the ZIP,
    stored as the owner's as uploads are. Everything or nothing: the files stored for an
    import that fails are deleted again."""
    with Bundle(archive) as bundle:
        parsed = parse_export(bundle.document())
        files = import_files_named(parsed)
        with transaction.atomic():  # before any file is stored (checked again after)
            conversation_quota_check(owner_id=owner.pk)
        try:
            import_files_unpack(owner=owner, bundle=bundle, files=files)
            return _parsed_store(owner, parsed, files.found)
        except BaseException:
            files_discard(files.created)
            raise


def _parsed_store(
    owner: User, parsed: ParsedExport, files: Mapping[str, StoredFile]
) -> Conversation:
    data = parsed.conversation
    # Version 1 exports and the short forms carry no generation settings or reasoning.
    settings = {
        "temperature": getattr(data, "temperature", None),
        "max_output_tokens": getattr(data, "max_output_tokens", None),
        "vision": getattr(data, "vision", True),
    }
    last_times = [m.created_at for m in parsed.messages]
    with transaction.atomic():
        conversation_quota_check(owner_id=owner.pk)
        # Before anything is stored; its tags and folder are made with its last batch.
        import_organising_check(owner=owner, data=data)
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
            import_started_at=timezone.now(),
            pinned=getattr(data, "pinned", False),
            **settings,
        )
        # From now the orphan sweep leaves them be (it takes files unattached for a day),
        # though their links are stored in later transactions.
        keys = [file.pk for file in files.values()]
        for start in range(0, len(keys), BATCH_ROWS):
            files_attached_mark(file_ids=keys[start : start + BATCH_ROWS])
    try:
        active, branch_count = _contents_store(conversation, parsed, files)
        with transaction.atomic():
            folder = import_organise(owner=owner, conversation=conversation, data=data)
            Conversation.with_imports.filter(pk=conversation.pk).update(
                active_branch_id=active,
                branch_count=branch_count,
                import_started_at=None,
                folder=folder,
            )
            audit_record(actor=owner, action=AuditEvent.Action.IMPORTED, conversation=conversation)
    except BaseException:
        _abandon(conversation.pk)
        raise
    conversation.folder = folder
    conversation.active_branch_id = active
    conversation.branch_count = branch_count
    conversation.import_started_at = None
    return conversation


def _abandon(conversation_id: UUID) -> None:
    """Delete what a failed import stored (or leave it to imports_abandoned_delete when
    the database cannot be reached now)."""
    try:
        with transaction.atomic():
            files_release(conversation_ids=[conversation_id])
            Conversation.with_imports.filter(pk=conversation_id).delete()
    except DatabaseError as exc:
        log.warning(
            "could not delete the failed import %s; it stays hidden until its clean-up",
            conversation_id,
            exc_info=exception_for_log(exc),
        )


def imports_abandoned_delete(*, now: datetime | None = None) -> int:
    """Delete the conversations of imports that never finished (their process died):
    hidden since longer than ABANDONED_AFTER. How many."""
    cutoff = (now or timezone.now()) - ABANDONED_AFTER
    deleted = 0
    stale = Conversation.with_imports.filter(import_started_at__lt=cutoff)
    while keys := list(stale.values_list("pk", flat=True)[:100]):
        with transaction.atomic():
            files_release(conversation_ids=keys)
            Conversation.with_imports.filter(pk__in=keys, import_started_at__lt=cutoff).delete()
        deleted += len(keys)
    return deleted


class _FreeTimes:
    """Times handed out once each: the earliest time not yet taken at or after the one
    asked for, a microsecond apart. Each taken time points past itself (to the next
    candidate, shortened as it is followed), so thousands of branches sharing one time
    cost about one step each, not one per branch taken before them."""

    def __init__(self) -> None:
        self._next: dict[datetime, datetime] = {}

    def take(self, wanted: datetime) -> datetime:
        passed = []
        found = wanted
        while found in self._next:
            passed.append(found)
            found = self._next[found]
        after = found + timedelta(microseconds=1)
        self._next[found] = after
        for taken in passed:
            self._next[taken] = after
        return found


@dataclass
class _Batch:
    """Rows waiting for the next transaction."""

    branches: list[Branch] = field(default_factory=list)
    messages: list[Message] = field(default_factory=list)
    attachments: list[Attachment] = field(default_factory=list)
    links: int = 0
    root: dict[str, Any] = field(default_factory=dict)  # the root branch's own update

    def full(self) -> bool:
        return (
            len(self.branches) >= BATCH_ROWS
            or len(self.messages) >= BATCH_ROWS
            or len(self.attachments) >= BATCH_ROWS
            or self.links >= BATCH_LINKS
        )

    def store(self, root: UUID) -> None:
        if not (self.branches or self.messages or self.root):
            return
        with transaction.atomic():
            if self.root:
                Branch.objects.filter(pk=root).update(**self.root)
            Branch.objects.bulk_create(self.branches)
            Message.objects.bulk_create(self.messages)
            Attachment.objects.bulk_create(self.attachments)
        self.branches, self.messages, self.attachments = [], [], []
        self.links, self.root = 0, {}


def _contents_store(
    conversation: Conversation, parsed: ParsedExport, files: Mapping[str, StoredFile]
) -> tuple[UUID, int]:
    """The document's branches and messages, stored a batch at a time in the document's
    order (each branch with its messages before the branches forked from them, as the
    fork points must hold at every commit). The active branch's new id, and how many
    branches there are."""
    root = conversation.active_branch_id
    assert root is not None
    batch = _Batch()
    rows = _Rows(conversation, parsed, root, files)
    batch.root = rows.root_update()
    for row in rows:
        if isinstance(row, Branch):
            batch.branches.append(row)
            batch.links += len(row.lineage)
        elif isinstance(row, Attachment):
            batch.attachments.append(row)
        else:
            batch.messages.append(row)
        if batch.full():
            batch.store(root)
    batch.store(root)
    return rows.ids.get(parsed.active_branch_id, root), max(1, len(parsed.branches or ()))


class _Rows:
    """The rows of a document in its order: each branch (but the root, which the
    conversation was born with) right before its own messages, with new ids; the other
    branches keep their fork points and times."""

    def __init__(
        self,
        conversation: Conversation,
        parsed: ParsedExport,
        root: UUID,
        files: Mapping[str, StoredFile],
    ) -> None:
        self.conversation, self.parsed, self.root = conversation, parsed, root
        self.files = files
        self.ids: dict[UUID | None, UUID] = {None: root}
        self._lineages: dict[UUID, list[list[Any]]] = {root: []}
        # Exports list branches by depth then creation time: equal times (documents
        # written elsewhere) are moved a microsecond apart, so the document's order
        # survives.
        self._times = _FreeTimes()
        self._own = Counter(getattr(m, "branch_id", None) for m in parsed.messages)

    def root_update(self) -> dict[str, Any]:
        branches = self.parsed.branches
        if not branches:
            return {"message_count": len(self.parsed.messages)}
        first = branches[0]
        self.ids[first.id] = self.root
        self._times.take(first.created_at)
        return {"message_count": self._own[first.id], "created_at": first.created_at}

    def _branch(self, index: int) -> Branch:
        branch = self.parsed.branches[index]  # type: ignore[index]
        parent = self.ids[branch.parent_id]
        row = Branch(
            id=uuid.uuid4(),
            conversation=self.conversation,
            parent_id=parent,
            fork_seq=branch.fork_seq,
            message_count=branch.fork_seq + self._own[branch.id],
            lineage=[*self._lineages[parent], [str(parent), branch.fork_seq]],
            created_at=self._times.take(branch.created_at),
        )
        self.ids[branch.id] = row.id
        self._lineages[row.id] = row.lineage
        return row

    def _message(self, m: ImportedMessage) -> Message:
        return Message(
            conversation=self.conversation,
            branch_id=self.ids.get(getattr(m, "branch_id", None), self.root),
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

    def _attachments(self, row: Message, m: ImportedMessage) -> Iterator[Attachment]:
        """The message's files, in order (after the message: a batch stores messages
        first)."""
        for position, attachment in enumerate(getattr(m, "attachments", None) or []):
            yield Attachment(
                conversation=self.conversation,
                message_id=row.pk,
                file_id=self.files[attachment.sha256].pk,
                position=position,
            )

    def __iter__(self) -> Iterator[Branch | Message | Attachment]:
        # Messages come branch by branch in the order of the branches (the import's
        # checks refused anything else): each branch goes out when its messages start,
        # after any branch listed before it that has none.
        branches = self.parsed.branches or []
        ahead = 1
        for message in self.parsed.messages:
            key = getattr(message, "branch_id", None)
            while key is not None and key not in self.ids and ahead < len(branches):
                yield self._branch(ahead)
                ahead += 1
            row = self._message(message)
            yield row
            yield from self._attachments(row, message)
        for index in range(ahead, len(branches)):
            yield self._branch(index)
