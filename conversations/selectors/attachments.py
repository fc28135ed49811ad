"""Reads of the files in messages."""

from collections.abc import Iterable
from typing import Any
from uuid import UUID

from conversations.models import Attachment
from conversations.serializers import attachment_payload


def attachment_payloads(*, message_ids: Iterable[UUID]) -> dict[UUID, list[dict[str, Any]]]:
    """The files in each of these messages, in order, as messages carry them: one query
    whatever the number of messages or files (messages with none are left out)."""
    found: dict[UUID, list[dict[str, Any]]] = {}
    keys = list(message_ids)
    if not keys:
        return found
    rows = (
        Attachment.objects.filter(message_id__in=keys)
        .select_related("file")
        .order_by("message_id", "position")
    )
    for row in rows:
        found.setdefault(row.message_id, []).append(attachment_payload(row.file))
    return found
