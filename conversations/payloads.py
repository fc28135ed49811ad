"""JSON shapes of runs and messages, shared by events and (later) the API."""

from typing import Any

from conversations.exchange import message_export_dict
from conversations.models import Message, Run


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
