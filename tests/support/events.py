"""Run events as the engine writes them, for tests that write a run's log by hand (a
worker's writes, played by the test): each payload is whole, as its declaration in
conversations/protocol.py says, so the doors under test see what they see in production."""

import uuid
from typing import Any

from django.utils import timezone


def run_dict(run_id: str | uuid.UUID, status: str = "in_progress", **fields: Any) -> dict[str, Any]:
    """A run as `serializers.run_payload` gives it, for a run no row backs."""
    now = timezone.now().isoformat()
    return {
        "id": str(run_id),
        "conversation_id": str(uuid.uuid4()),
        "branch_id": None,
        "status": status,
        "model": "m",
        "iterations": 0,
        "usage": {},
        "error": None,
        "trigger_message_id": None,
        "created_at": now,
        "started_at": now,
        "finished_at": None,
        "cancel_requested_at": None,
        **fields,
    }


def message_dict(
    message_id: str | uuid.UUID, content: str, *, role: str = "assistant", **fields: Any
) -> dict[str, Any]:
    """A stored message as `serializers.message_payload` gives it."""
    return {
        "id": str(message_id),
        "conversation_id": str(uuid.uuid4()),
        "branch_id": None,
        "seq": 2,
        "role": role,
        "kind": "message",
        "content": content,
        "reasoning": "",
        "reasoning_ms": None,
        "tool_calls": [],
        "tool_call_id": None,
        "name": None,
        "created_at": timezone.now().isoformat(),
        "run_id": None,
        "usage": None,
        "provider_payload": None,
        "attachments": [],
        "alternatives": None,
        **fields,
    }
