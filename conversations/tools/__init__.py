"""Tools the model may call: the registry (`@tool`, argument schemas from type hints,
`tool_execute`, which never raises) and the built-in tools (tools/builtins.py), which
register themselves when the app is ready."""

from conversations.tools.execute import tool_execute
from conversations.tools.registry import (
    Tool,
    ToolContext,
    ToolError,
    ToolImage,
    ToolOutput,
    ToolResult,
    isolated_registry,
    tool,
    tool_catalog,
    tool_default_names,
    tool_definitions,
    tool_get,
    tool_names,
    tool_names_problems,
)

__all__ = [
    "Tool",
    "ToolContext",
    "ToolError",
    "ToolImage",
    "ToolOutput",
    "ToolResult",
    "isolated_registry",
    "tool",
    "tool_catalog",
    "tool_default_names",
    "tool_definitions",
    "tool_execute",
    "tool_get",
    "tool_names",
    "tool_names_problems",
]
