"""A `POST /responses` body read into what the engine runs, or a 400 naming the first
problem by its parameter, as OpenAI's API answers.

Function tools the client declares keep OpenAI's Responses shape for the answer and are
sent to the model in the chat-completions shape; hosted tools (web search, file search,
code interpreter, ...) are refused by name, as Parley has none of them. Parameters that
change nothing here (`include`, `user`, `text` as plain text, ...) are accepted and
ignored, so a client that always sends them still works.
"""

import re
from dataclasses import dataclass
from typing import Any

from conversations import validation
from conversations.engine import ResponseAsk
from conversations.models.tool_servers import TOOL_SEPARATOR
from conversations.openai_api.errors import invalid, quoted
from conversations.openai_api.items_in import InputMessages, new_messages
from conversations.openai_api.views.conversations import _metadata
from conversations.selectors.tool_servers import tool_server_names
from conversations.tools import tool_catalog
from conversations.validation import type_name

# How many input items one request may carry: a client without a stored conversation
# sends its whole history each time.
MAX_INPUT_ITEMS = 500
MODEL_MAX = 100
_TOOL_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")
_CHOICES = ("auto", "none", "required")
_IGNORED = {
    "include",
    "user",
    "safety_identifier",
    "prompt_cache_key",
    "service_tier",
    "stream_options",
    "truncation",
    "text",
}
ALLOWED = {
    "model",
    "input",
    "instructions",
    "conversation",
    "previous_response_id",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "stream",
    "background",
    "store",
    "metadata",
    "temperature",
    "top_p",
    "max_output_tokens",
    *_IGNORED,
}


@dataclass(frozen=True)
class ResponseRequest:
    ask: ResponseAsk
    # The input as read, to name a refused call or result by its item.
    input: InputMessages
    conversation: str | None
    previous_response_id: str | None
    stream: bool
    background: bool
    store: bool


def _wrong_type(param: str, expected: str, value: Any) -> Exception:
    return invalid(
        f"Invalid type for '{param}': expected {expected}, but got {type_name(value)}.",
        param=param,
        code="invalid_type",
    )


def _flag(body: dict[str, Any], name: str, default: bool) -> bool:
    value = body.get(name)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise _wrong_type(name, "a boolean", value)
    return value


def _number(body: dict[str, Any], name: str, low: float, high: float) -> float | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _wrong_type(name, "a number", value)
    if not low <= value <= high:
        raise invalid(f"Invalid '{name}': must be from {low:g} to {high:g}.", param=name)
    return float(value)


def _string(body: dict[str, Any], name: str) -> str | None:
    value = body.get(name)
    if value is None:
        return None
    if not isinstance(value, str):
        raise _wrong_type(name, "a string", value)
    return value


def _input(value: Any) -> InputMessages:
    if isinstance(value, str):
        value = [{"role": "user", "content": value}]
    return new_messages(value, param="input", at_least=1, most=MAX_INPUT_ITEMS)


def _tools(value: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(the tools as the answer echoes them, as the model is sent them)."""
    if value is None:
        return [], []
    if not isinstance(value, list):
        raise _wrong_type("tools", "an array", value)
    own = {tool["name"] for tool in tool_catalog()}
    # A tool server's tools are named `<server>__<tool>`: a client tool of that form could
    # clash with one the conversation enables, so the whole form is kept for them.
    servers = tool_server_names()
    echoed: list[dict[str, Any]] = []
    sent: list[dict[str, Any]] = []
    for index, tool in enumerate(value):
        where = f"tools[{index}]"
        if not isinstance(tool, dict):
            raise _wrong_type(where, "an object", tool)
        if tool.get("type") != "function":
            raise invalid(
                f"Invalid '{where}.type': {quoted(tool.get('type'))!r} tools are not supported; "
                "Parley runs function tools the client declares (and its own tools).",
                param=f"{where}.type",
            )
        name = tool.get("name")
        if not isinstance(name, str) or not _TOOL_NAME.fullmatch(name):
            raise invalid(
                f"Invalid '{where}.name': letters, digits, '_' and '-', 1 to 64 of them.",
                param=f"{where}.name",
            )
        prefix, separator, _ = name.partition(TOOL_SEPARATOR)
        if (
            name in own
            or (separator and prefix in servers)
            or any(other["name"] == name for other in echoed)
        ):
            raise invalid(
                f"Invalid '{where}.name': {name!r} is already a tool of this request or "
                "one of Parley's own tools.",
                param=f"{where}.name",
            )
        description = tool.get("description")
        parameters = tool.get("parameters")
        strict = tool.get("strict")
        if description is not None and not isinstance(description, str):
            raise _wrong_type(f"{where}.description", "a string", description)
        if parameters is not None and not isinstance(parameters, dict):
            raise _wrong_type(f"{where}.parameters", "an object", parameters)
        if strict is not None and not isinstance(strict, bool):
            raise _wrong_type(f"{where}.strict", "a boolean", strict)
        schema = parameters if parameters is not None else {"type": "object", "properties": {}}
        echoed.append(
            {
                "type": "function",
                "name": name,
                "description": description,
                "parameters": schema,
                "strict": True if strict is None else strict,
            }
        )
        function: dict[str, Any] = {"name": name, "parameters": schema}
        if description:
            function["description"] = description
        if strict:
            function["strict"] = True
        sent.append({"type": "function", "function": function})
    return echoed, sent


def _tool_choice(value: Any, tools: list[dict[str, Any]]) -> tuple[Any, Any]:
    """(the choice as the answer echoes it, as the model is sent it)."""
    if value is None:
        return "auto", None
    if isinstance(value, str):
        if value not in _CHOICES:
            raise invalid(
                f"Invalid 'tool_choice': expected one of {', '.join(_CHOICES)}.",
                param="tool_choice",
            )
        return value, value
    if isinstance(value, dict) and value.get("type") == "function":
        name = value.get("name")
        if not any(tool["name"] == name for tool in tools):
            raise invalid(
                f"Invalid 'tool_choice.name': {quoted(name)!r} is not a function in 'tools'.",
                param="tool_choice.name",
            )
        return {"type": "function", "name": name}, {"type": "function", "function": {"name": name}}
    raise invalid(
        "Invalid 'tool_choice': expected 'auto', 'none', 'required' or a function.",
        param="tool_choice",
    )


def _text_format(text: Any) -> None:
    """`text` is accepted only as plain text: a client asking for JSON (`json_schema`,
    `json_object`) must hear that it would get prose, not find out by parsing it."""
    if text is None:
        return
    if not isinstance(text, dict):
        raise _wrong_type("text", "an object", text)
    form = text.get("format")
    if form is not None and (not isinstance(form, dict) or form.get("type") != "text"):
        raise invalid(
            "Invalid 'text.format.type': only 'text' is supported; Parley does not "
            "constrain replies to a JSON schema.",
            param="text.format.type",
            code="unsupported_value",
        )


def response_request(body: dict[str, Any]) -> ResponseRequest:
    model = _string(body, "model")
    if not model:
        raise invalid(
            "Missing required parameter: 'model'.", param="model", code="missing_required_parameter"
        )
    problems = validation.text_problems(model, path="model", max_chars=MODEL_MAX)
    if problems:
        raise invalid(f"Invalid 'model': {problems[0].message}.", param="model")
    if "input" not in body:
        raise invalid(
            "Missing required parameter: 'input'.", param="input", code="missing_required_parameter"
        )
    read = _input(body["input"])
    _text_format(body.get("text"))
    instructions = _string(body, "instructions") or ""
    problems = validation.system_prompt_problems(instructions, path="instructions")
    if problems:
        raise invalid(f"Invalid 'instructions': {problems[0].message}.", param="instructions")
    conversation = body.get("conversation")
    if isinstance(conversation, dict):
        conversation = conversation.get("id")
    if conversation is not None and not isinstance(conversation, str):
        raise _wrong_type("conversation", "a string or {id}", conversation)
    previous = _string(body, "previous_response_id")
    if conversation and previous:
        raise invalid(
            "Give 'conversation' or 'previous_response_id', not both.",
            param="previous_response_id",
        )
    echoed_tools, sent_tools = _tools(body.get("tools"))
    echoed_choice, sent_choice = _tool_choice(body.get("tool_choice"), echoed_tools)
    limit = body.get("max_output_tokens")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise invalid("Invalid 'max_output_tokens': a positive integer.", param="max_output_tokens")
    generation: dict[str, Any] = {
        "temperature": _number(body, "temperature", 0, 2),
        "top_p": _number(body, "top_p", 0, 1),
        "max_output_tokens": limit,
        "tool_choice": sent_choice,
        "parallel_tool_calls": _flag(body, "parallel_tool_calls", True)
        if "parallel_tool_calls" in body and body["parallel_tool_calls"] is not None
        else None,
    }
    store = _flag(body, "store", True)
    background = _flag(body, "background", False)
    if background and not store:
        raise invalid("A background response must be stored: drop 'store: false'.", param="store")
    options = {
        "background": background,
        "store": store,
        "conversation": bool(conversation),
        "tools": echoed_tools,
        "tool_choice": echoed_choice,
    }
    ask = ResponseAsk(
        messages=read.messages,
        model=model,
        instructions=instructions,
        client_tools=sent_tools,
        generation={key: value for key, value in generation.items() if value is not None},
        metadata=_metadata(body.get("metadata")),
        options=options,
    )
    return ResponseRequest(
        ask=ask,
        input=read,
        conversation=conversation or None,
        previous_response_id=previous or None,
        stream=_flag(body, "stream", False),
        background=background,
        store=store,
    )
