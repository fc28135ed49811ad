"""Calling tools as the tool loop does, in tests: a conversation's context for a tool, and
`tool_execute` with the built-in tools enabled."""

import json
from typing import Any

from accounts.models import User
from conversations.models import Conversation
from conversations.tools import ToolContext, ToolResult, tool_execute
from tests.support.conversations import BUILTIN_TOOLS

ALL = list(BUILTIN_TOOLS)


def offline_context(**overrides: Any) -> ToolContext:
    """A context for tools that never touch the database (unsaved model instances)."""
    user = User(username="nobody")
    values: dict[str, Any] = {
        "call_id": "call_1",
        "is_resume": False,
        "conversation": Conversation(owner=user),
        "user": user,
    }
    values.update(overrides)
    return ToolContext(**values)


def run(
    name: str,
    arguments: Any = None,
    *,
    context: ToolContext | None = None,
    enabled: list[str] | None = None,
) -> ToolResult:
    raw = arguments if isinstance(arguments, str) else json.dumps(arguments or {})
    result = tool_execute(
        name=name,
        arguments=raw,
        context=context or offline_context(),
        enabled=ALL if enabled is None else enabled,
    )
    assert isinstance(result.output, str)
    return result


def owner_context(conversation: Conversation, **overrides: Any) -> ToolContext:
    values: dict[str, Any] = {
        "call_id": "call_draft",
        "is_resume": False,
        "conversation": conversation,
        "user": conversation.owner,
    }
    values.update(overrides)
    return ToolContext(**values)
