"""Reads of the files in messages."""

from collections.abc import Iterable, Iterator
from typing import Any
from uuid import UUID

from django.db.models import Exists, OuterRef, QuerySet

from conversations.models import Attachment, Conversation, Message, StoredFile
from conversations.serializers import attachment_payload


def _files_by_message(attachments: QuerySet[Attachment]) -> dict[UUID, list[StoredFile]]:
    found: dict[UUID, list[StoredFile]] = {}
    for row in attachments.select_related("file").order_by("message_id", "position"):
        found.setdefault(row.message_id, []).append(row.file)
    return found


def attachment_files(*, message_ids: Iterable[UUID]) -> dict[UUID, list[StoredFile]]:
    """The files in each of these messages, in order: one query whatever the number of
    messages or files (messages with none are left out)."""
    keys = list(message_ids)
    if not keys:
        return {}
    return _files_by_message(Attachment.objects.filter(message_id__in=keys))


def attachment_payloads(*, message_ids: Iterable[UUID]) -> dict[UUID, list[dict[str, Any]]]:
    """The files in each of these messages as messages carry them, in the same one query."""
    return _payloads(attachment_files(message_ids=message_ids))


def attachment_payloads_of(*, messages: QuerySet[Message]) -> dict[UUID, list[dict[str, Any]]]:
    """The same for the messages a queryset selects, read through it as a subquery: one
    query however many messages (a long transcript sends no list of ids)."""
    return _payloads(
        _files_by_message(Attachment.objects.filter(message__in=messages.values("pk")))
    )


def _payloads(files: dict[UUID, list[StoredFile]]) -> dict[UUID, list[dict[str, Any]]]:
    return {key: [attachment_payload(file) for file in found] for key, found in files.items()}


def conversation_file_get(*, conversation: Conversation, file_id: UUID | str) -> StoredFile:
    """A file some message of the conversation (on any branch) carries, or
    StoredFile.DoesNotExist: a file of the owner's that this conversation does not hold,
    or any other, is not found here."""
    try:
        key = UUID(str(file_id))
    except ValueError:
        raise StoredFile.DoesNotExist from None
    held = Attachment.objects.filter(conversation_id=conversation.pk, file_id=OuterRef("pk"))
    return StoredFile.objects.filter(Exists(held), pk=key).get()


def conversation_has_attachments(*, conversation_id: UUID) -> bool:
    """Whether any message of the conversation, on any branch, carries a file."""
    return Attachment.objects.filter(conversation_id=conversation_id).exists()


# Files listed per query of conversation_file_pages.
FILE_PAGE = 500


def conversation_file_pages(*, conversation_id: UUID) -> Iterator[list[tuple[str, str]]]:
    """The distinct bytes the conversation's messages carry, as (sha256, storage name)
    pages in sha256 order: a query per FILE_PAGE files, so a long list never sits in
    memory. The same bytes in files of two owners (a conversation continued from a share
    holds the sharer's) come once."""
    held = Attachment.objects.filter(conversation_id=conversation_id, file_id=OuterRef("pk"))
    rows = StoredFile.objects.filter(Exists(held)).order_by("sha256", "pk")
    last = ""
    while True:
        page: list[tuple[str, str]] = []
        for sha256, name in rows.filter(sha256__gt=last).values_list("sha256", "storage_name")[
            :FILE_PAGE
        ]:
            if sha256 != last:
                page.append((sha256, name))
                last = sha256
        if not page:
            return
        yield page
