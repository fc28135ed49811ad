"""What an imported conversation must mean, whatever form it came in: settings within
their limits, roles and kinds that fit, sequence numbers gapless from 1, every tool
result answering an earlier call of the same conversation, text any database can store.
"""

from typing import TYPE_CHECKING, Any

from conversations import validation
from conversations.errors import Problem
from conversations.tools.registry import tool_names_problems

if TYPE_CHECKING:
    from conversations.formats.importing import ImportedConversation, ImportedMessage


def _nul_problems(value: Any, path: str) -> list[Problem]:
    """NUL anywhere in stored JSON fails on PostgreSQL, so find it up front."""
    if isinstance(value, str):
        return (
            [Problem(path, "contains a NUL character, which cannot be stored")]
            if ("\x00" in value)
            else []
        )
    if isinstance(value, dict):
        found = []
        for key, item in value.items():
            found += _nul_problems(key, f"{path}.{key!r}") + _nul_problems(item, f"{path}.{key}")
        return found
    if isinstance(value, list):
        return [p for i, item in enumerate(value) for p in _nul_problems(item, f"{path}[{i}]")]
    return []


def conversation_problems(conversation: "ImportedConversation") -> list[Problem]:
    base = "$.conversation"
    return (
        validation.title_problems(conversation.title, path=f"{base}.title")
        + validation.system_prompt_problems(
            conversation.system_prompt, path=f"{base}.system_prompt"
        )
        + validation.model_problems(conversation.model, path=f"{base}.model")
        + tool_names_problems(conversation.tools, path=f"{base}.tools")
        + validation.metadata_problems(conversation.metadata, path=f"{base}.metadata")
        + validation.draft_problems(conversation.draft, path=f"{base}.draft")
        + validation.temperature_problems(
            getattr(conversation, "temperature", None), path=f"{base}.temperature"
        )
        + validation.max_output_tokens_problems(
            getattr(conversation, "max_output_tokens", None), path=f"{base}.max_output_tokens"
        )
    )


def message_problems(messages: "list[ImportedMessage]") -> list[Problem]:
    problems: list[Problem] = []
    pending: dict[str, int] = {}  # unanswered call id -> seq of the assistant message
    for index, message in enumerate(messages):
        path = f"$.messages[{index}]"
        if message.seq != index + 1:
            problems.append(
                Problem(f"{path}.seq", f"is {message.seq}; expected {index + 1} (gapless from 1)")
            )
        problems += validation.content_problems(message.content, path=f"{path}.content")
        problems += validation.content_problems(
            getattr(message, "reasoning", ""), path=f"{path}.reasoning"
        )
        if (getattr(message, "reasoning_ms", None) or 0) < 0:
            problems.append(Problem(f"{path}.reasoning_ms", "must not be negative"))
        problems += validation.usage_problems(message.usage, path=f"{path}.usage")
        problems += _nul_problems(message.provider_payload, f"{path}.provider_payload")
        # Checked here, not left to the database: PostgreSQL fails on an over-long varchar.
        problems += validation.text_problems(
            message.name or "", path=f"{path}.name", max_chars=validation.TOOL_NAME_MAX
        )
        problems += validation.text_problems(
            message.tool_call_id or "",
            path=f"{path}.tool_call_id",
            max_chars=validation.TOOL_CALL_ID_MAX,
        )
        if message.kind != "message" and message.role != "system":
            problems.append(Problem(f"{path}.kind", f"{message.kind!r} requires role 'system'"))
        if message.tool_calls and message.role != "assistant":
            problems.append(Problem(f"{path}.tool_calls", "only assistant messages call tools"))
        for call_index, call in enumerate(message.tool_calls):
            call_path = f"{path}.tool_calls[{call_index}]"
            problems += _nul_problems(call.model_dump(), call_path)
            if not call.id:
                problems.append(Problem(f"{call_path}.id", "must not be empty"))
            elif call.id in pending:
                problems.append(
                    Problem(f"{call_path}.id", f"{call.id!r} is already an unanswered call")
                )
            else:
                pending[call.id] = message.seq
            if not call.name:
                problems.append(Problem(f"{call_path}.name", "must not be empty"))
        if message.role == "tool":
            if not message.tool_call_id:
                problems.append(Problem(f"{path}.tool_call_id", "a tool message needs one"))
            elif pending.pop(message.tool_call_id, None) is None:
                problems.append(
                    Problem(
                        f"{path}.tool_call_id",
                        f"{message.tool_call_id!r} answers no earlier unanswered tool call",
                    )
                )
        elif message.tool_call_id:
            problems.append(Problem(f"{path}.tool_call_id", "only tool messages carry one"))
    return problems
