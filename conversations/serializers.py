"""The one place a conversation, a message, a run or a file becomes a dict: the API's responses,
the run events, the notifications and the export (formats/exporting.py) all build on these.
"""

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from conversations.models import Conversation, Message, Run, StoredFile
from conversations.validation import usage_known

# The columns a message's dict is made from: a page of the API reads just these
# (`.values(*MESSAGE_FIELDS)`) instead of whole instances.
MESSAGE_FIELDS = (
    "id",
    "conversation_id",
    "branch_id",
    "seq",
    "role",
    "kind",
    "content",
    "reasoning",
    "reasoning_ms",
    "tool_calls",
    "tool_call_id",
    "name",
    "created_at",
    "run_id",
    "usage",
    "provider_payload",
)


def _time(value: datetime) -> str:
    # Full microseconds (Django's JSON encoder would cut them to milliseconds).
    return value.isoformat()


def conversation_export_dict(conversation: Conversation) -> dict[str, Any]:
    """A conversation as the export document carries it."""
    return {
        "id": str(conversation.id),
        "title": conversation.title,
        "system_prompt": conversation.system_prompt,
        "model": conversation.model,
        "tools": conversation.tools,
        "metadata": conversation.metadata,
        "draft": conversation.draft,
        "created_at": _time(conversation.created_at),
        "updated_at": _time(conversation.updated_at),
        "forked_from": str(conversation.forked_from_id) if conversation.forked_from_id else None,
        "temperature": conversation.temperature,
        "max_output_tokens": conversation.max_output_tokens,
        "vision": conversation.vision,
        "active_branch_id": _key(conversation.active_branch_id),
    }


def conversation_tag_names(conversation: Conversation) -> list[str]:
    """The conversation's tag names, sorted whatever their case (from `tags` prefetched
    with it, or one query)."""
    return sorted((tag.name for tag in conversation.tags.all()), key=str.lower)


def conversation_organising_export_dict(conversation: Conversation) -> dict[str, Any]:
    """How the conversation is organised, as the export document carries it: by names, so
    an import files it among the importer's own tags and folders (`folder` read with it,
    or one query)."""
    folder = conversation.folder  # no query when it is in none
    return {
        "tags": conversation_tag_names(conversation),
        "pinned": conversation.pinned,
        "folder": folder.name if folder is not None else None,
    }


def message_export_dict(message: Message) -> dict[str, Any]:
    """A stored message as the export document carries it."""
    return _message_dict({field: getattr(message, field) for field in MESSAGE_FIELDS})


def _key(value: Any) -> str | None:
    return str(value) if value else None


def branch_export_dict(row: Mapping[str, Any]) -> dict[str, Any]:
    """A branch as the export document carries it."""
    return {
        "id": str(row["id"]),
        "parent_id": _key(row["parent_id"]),
        "fork_seq": row["fork_seq"],
        "created_at": _time(row["created_at"]),
    }


def branch_payload(row: Mapping[str, Any]) -> dict[str, Any]:
    """A branch as clients see it: with the length of its path."""
    return {**branch_export_dict(row), "message_count": row["message_count"]}


def _message_dict(row: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "id": str(row["id"]),
        "branch_id": _key(row["branch_id"]),
        "seq": row["seq"],
        "role": row["role"],
        "kind": row["kind"],
        "content": row["content"],
        "reasoning": row["reasoning"],
        "reasoning_ms": row["reasoning_ms"],
        "tool_calls": row["tool_calls"],
        "tool_call_id": row["tool_call_id"] or None,
        "name": row["name"] or None,
        "created_at": _time(row["created_at"]),
        "run_id": str(row["run_id"]) if row["run_id"] else None,
        # What the import accepts, so an export always imports back unchanged.
        "usage": usage_known(row["usage"]),
        "provider_payload": row["provider_payload"],
    }


def run_payload(run: Run) -> dict[str, Any]:
    def when(value: Any) -> str | None:
        return value.isoformat() if value else None

    return {
        "id": str(run.id),
        # None for a run kept nowhere (a response with `store: false`).
        "conversation_id": _key(run.conversation_id),
        "branch_id": _key(run.branch_id),
        "status": run.status,
        "model": run.model,
        "iterations": run.iterations,
        "usage": run.usage,
        "error": run.error,
        "trigger_message_id": str(run.trigger_message_id) if run.trigger_message_id else None,
        "created_at": when(run.created_at),
        "started_at": when(run.started_at),
        "finished_at": when(run.finished_at),
        "cancel_requested_at": when(run.cancel_requested_at),
    }


def message_payload(
    message: Message,
    *,
    alternatives: dict[str, Any] | None = None,
    attachments: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """A stored message as clients see it: the export's shape plus its conversation, its
    files (`attachments`: `attachment_payload`s the caller read; none by default) and its
    alternatives (`{"index", "count", "branch_ids"}`, or None where it has none)."""
    return {
        **message_export_dict(message),
        "conversation_id": str(message.conversation_id),
        "attachments": list(attachments or []),
        "alternatives": alternatives,
    }


def conversation_payload(conversation: Conversation) -> dict[str, Any]:
    """A conversation's settings and counters as clients see them (no admin-only fields):
    the export's shape and the live state around it."""

    def when(value: Any) -> str | None:
        return value.isoformat() if value else None

    return {
        **conversation_export_dict(conversation),
        "draft_edited": conversation.draft_edited,
        "message_count": conversation.message_count,
        "branch_count": conversation.branch_count,
        "archived": conversation.archived_at is not None,
        "archived_at": when(conversation.archived_at),
        "last_activity_at": when(conversation.last_activity_at),
        "forked_at_seq": conversation.forked_at_seq,
        **conversation_organising_payload(conversation),
    }


def conversation_organising_payload(conversation: Conversation) -> dict[str, Any]:
    """How the owner organised it, as clients see it (and `conversation.organised` tells
    every tab): the pin, the folder by id, the tags by name."""
    return {
        "pinned": conversation.pinned,
        "folder_id": _key(conversation.folder_id),
        "tags": conversation_tag_names(conversation),
    }


def message_row_payload(row: Mapping[str, Any]) -> dict[str, Any]:
    """`message_payload` from a MESSAGE_FIELDS row (with its `alternatives` and
    `attachments`, if read)."""
    return {
        **_message_dict(row),
        "conversation_id": str(row["conversation_id"]),
        "attachments": list(row.get("attachments") or []),
        "alternatives": row.get("alternatives"),
    }


# What a link's reader is not shown of a message: the owner's own records (which
# conversation, branch and run it belongs to, the usage, the provider's details).
SHARED_WITHHELD = frozenset({"conversation_id", "branch_id", "run_id", "usage", "provider_payload"})


def shared_message_payload(row: Mapping[str, Any]) -> dict[str, Any]:
    """A message as a share link shows it, from a MESSAGE_FIELDS row with `attachments`."""
    payload = {
        key: value for key, value in _message_dict(row).items() if key not in SHARED_WITHHELD
    }
    payload["attachments"] = list(row.get("attachments") or [])
    return payload


def attachment_payload(file: StoredFile) -> dict[str, Any]:
    """A file as a message carries it."""
    return {
        "id": str(file.id),
        "filename": file.filename,
        "content_type": file.content_type,
        "size": file.size,
    }


def attachment_export_dict(file: StoredFile) -> dict[str, Any]:
    """A file as the export document carries it: with the sha256 that names its bytes in a
    ZIP export, and that an import finds them by."""
    return {**attachment_payload(file), "sha256": file.sha256}


def file_payload(file: StoredFile) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "id": str(file.id),
        "filename": file.filename,
        "content_type": file.content_type,
        "size": file.size,
        "sha256": file.sha256,
        "created_at": _time(file.created_at),
    }
    if file.width is not None:
        payload["width"], payload["height"] = file.width, file.height
    return payload
