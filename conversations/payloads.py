"""JSON shapes of conversations, runs and messages, shared by events and the API."""

from typing import Any

from conversations.exchange import message_export_dict
from conversations.models import Conversation, Message, Run
from conversations.validation import usage_known


def run_payload(run: Run) -> dict[str, Any]:
    def when(value: Any) -> str | None:
        return value.isoformat() if value else None

    return {
        "id": str(run.id),
        "conversation_id": str(run.conversation_id),
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


def message_payload(message: Message) -> dict[str, Any]:
    """A stored message as clients see it: the export's shape plus its conversation."""
    return {**message_export_dict(message), "conversation_id": str(message.conversation_id)}


def conversation_payload(conversation: Conversation) -> dict[str, Any]:
    """A conversation's settings and counters as clients see them (no admin-only fields)."""

    def when(value: Any) -> str | None:
        return value.isoformat() if value else None

    return {
        "id": str(conversation.id),
        "title": conversation.title,
        "system_prompt": conversation.system_prompt,
        "model": conversation.model,
        "tools": conversation.tools,
        "metadata": conversation.metadata,
        "draft": conversation.draft,
        "draft_edited": conversation.draft_edited,
        "message_count": conversation.message_count,
        "archived": conversation.archived_at is not None,
        "archived_at": when(conversation.archived_at),
        "created_at": when(conversation.created_at),
        "updated_at": when(conversation.updated_at),
        "last_activity_at": when(conversation.last_activity_at),
        "forked_from": str(conversation.forked_from_id) if conversation.forked_from_id else None,
        "forked_at_seq": conversation.forked_at_seq,
    }


def message_row_payload(row: dict[str, Any]) -> dict[str, Any]:
    """`message_payload` from a `selectors.MESSAGE_FIELDS` row instead of an instance."""
    return {
        "id": str(row["id"]),
        "seq": row["seq"],
        "role": row["role"],
        "kind": row["kind"],
        "content": row["content"],
        "tool_calls": row["tool_calls"],
        "tool_call_id": row["tool_call_id"] or None,
        "name": row["name"] or None,
        "created_at": row["created_at"].isoformat(),
        "run_id": str(row["run_id"]) if row["run_id"] else None,
        "usage": usage_known(row["usage"]),
        "provider_payload": row["provider_payload"],
        "conversation_id": str(row["conversation_id"]),
    }
