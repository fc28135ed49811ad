"""Files put in a user's message: the ids a client sends checked and resolved to the
sender's own files, and the links stored in order. Called inside the transaction that
stores the message, so a refusal stores nothing."""

from collections.abc import Sequence
from typing import Any
from uuid import UUID

from django.conf import settings
from django.utils import timezone

from conversations.errors import Problem, ValidationFailed
from conversations.models import Attachment, Message, StoredFile
from conversations.validation import type_name


def attachment_ids_checked(file_ids: Any) -> list[UUID | None]:
    """The shape of `attachments` (a list of at most PARLEY_FILE_MAX_PER_MESSAGE distinct
    strings), before anything is read. A string that is no id gives None: it names no
    file, so it is refused as an unknown one is (404)."""
    if file_ids is None:
        return []
    if not isinstance(file_ids, list):
        raise ValidationFailed(
            [Problem("$.attachments", f"must be a list of file ids, not {type_name(file_ids)}")]
        )
    limit: int = settings.PARLEY_FILE_MAX_PER_MESSAGE
    if len(file_ids) > limit:
        raise ValidationFailed(
            [Problem("$.attachments", f"at most {limit} files per message ({len(file_ids)} given)")]
        )
    keys: list[UUID | None] = []
    seen: set[str] = set()
    problems: list[Problem] = []
    for index, value in enumerate(file_ids):
        path = f"$.attachments[{index}]"
        if not isinstance(value, str):
            problems.append(Problem(path, f"must be a file id, not {type_name(value)}"))
            continue
        try:
            key: UUID | None = UUID(value)
        except ValueError:
            key = None
        name = str(key) if key is not None else value
        if name in seen:
            problems.append(Problem(path, "is already attached to this message"))
        seen.add(name)
        keys.append(key)
    if problems:
        raise ValidationFailed(problems)
    return keys


def attachment_files_resolve(*, owner_id: int, file_ids: Any) -> list[StoredFile]:
    """The owner's files named by `file_ids`, in their order, locked until the message is
    stored (the orphan sweep locks what it deletes, so it cannot take one meanwhile).
    StoredFile.DoesNotExist (a 404 naming no id) when one is another user's or none."""
    keys = attachment_ids_checked(file_ids)
    if not keys:
        return []
    if None in keys:
        raise StoredFile.DoesNotExist
    found = {
        row.pk: row
        for row in StoredFile.objects.select_for_update().filter(pk__in=keys, owner_id=owner_id)
    }
    if len(found) != len(keys):
        raise StoredFile.DoesNotExist
    return [found[key] for key in keys if key is not None]


def attachments_store(*, message: Message, files: Sequence[StoredFile]) -> None:
    """Link the files to a message just stored, in order."""
    if files:
        Attachment.objects.bulk_create(
            Attachment(
                conversation_id=message.conversation_id,
                message_id=message.pk,
                file_id=file.pk,
                position=position,
            )
            for position, file in enumerate(files)
        )
        files_attached_mark(file_ids=[file.pk for file in files])


def files_attached_mark(*, file_ids: Sequence[UUID]) -> None:
    """Note that messages use these files (the orphan sweep leaves them alone from now on):
    called whenever Attachment rows are made."""
    StoredFile.objects.filter(pk__in=file_ids, attached_at=None).update(attached_at=timezone.now())


# Copied messages per query when their files are linked to the copies.
COPY_BATCH = 1000


def attachments_copy(*, conversation_id: UUID, copies: dict[UUID, UUID]) -> None:
    """Link the copies of messages (fork, a replaced item's tail: `copies` maps each
    original to its copy) to the same files as their originals, in the same order: a copy
    says what its message said, files included."""
    originals = list(copies)
    for start in range(0, len(originals), COPY_BATCH):
        rows = Attachment.objects.filter(message_id__in=originals[start : start + COPY_BATCH])
        # The originals' files are attached already (and stay so with the copies).
        Attachment.objects.bulk_create(
            Attachment(
                conversation_id=conversation_id,
                message_id=copies[message_id],
                file_id=file_id,
                position=position,
            )
            for message_id, file_id, position in rows.values_list(
                "message_id", "file_id", "position"
            )
        )
