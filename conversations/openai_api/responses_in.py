"""A `POST /responses` body read into what the engine runs, or a 400 naming the first
problem by its parameter, as OpenAI's API answers.

Function tools the client declares keep OpenAI's Responses shape for the answer and are
sent to the model in the chat-completions shape; hosted tools (web search, file search,
code interpreter, ...) are refused by name, as Parley has none of them. The settings
besides (sampling, reasoning, truncation, text, ...) are read by response_params.py.
"""

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from conversations import validation
from conversations.engine import ResponseAsk
from conversations.models.tool_servers import TOOL_SEPARATOR
from conversations.openai_api.errors import invalid, quoted, wrong_type
from conversations.openai_api.items_in import InputMessages, new_messages
from conversations.openai_api.response_params import choice, flag, settings_read, string
from conversations.openai_api.views.conversations import _metadata
from conversations.selectors.tool_servers import tool_server_names
from conversations.tools import tool_catalog

# How many input items one request may carry: a client without a stored conversation
# sends its whole history each time.
MAX_INPUT_ITEMS = 500
MODEL_MAX = 100
# The most tools an `allowed_tools` choice names (the specification's bound).
ALLOWED_TOOLS_MAX = 128
_TOOL_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")
_CHOICES = ("auto", "none", "required")
# Every parameter of Open Responses' CreateResponseBody, and OpenAI's `conversation` and
# `user`.
ALLOWED = {
    "model",
    "input",
    "instructions",
    "conversation",
    "previous_response_id",
    "include",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "max_tool_calls",
    "stream",
    "stream_options",
    "background",
    "store",
    "metadata",
    "text",
    "temperature",
    "top_p",
    "presence_penalty",
    "frequency_penalty",
    "max_output_tokens",
    "reasoning",
    "truncation",
    "top_logprobs",
    "service_tier",
    "safety_identifier",
    "prompt_cache_key",
    "user",
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


def input_read(value: Any) -> InputMessages:
    """`input`: a string (one user message) or up to MAX_INPUT_ITEMS items."""
    if isinstance(value, str):
        value = [{"role": "user", "content": value}]
    return new_messages(value, param="input", at_least=1, most=MAX_INPUT_ITEMS)


def model_read(body: dict[str, Any]) -> str:
    """`model`, required on every request that calls one, as OpenAI's API requires it."""
    model = string(body, "model")
    if not model:
        raise invalid(
            "Missing required parameter: 'model'.", param="model", code="missing_required_parameter"
        )
    problems = validation.text_problems(model, path="model", max_chars=MODEL_MAX)
    if problems:
        raise invalid(f"Invalid 'model': {problems[0].message}.", param="model")
    return model


def instructions_read(body: dict[str, Any]) -> str:
    """`instructions`: sent first, never stored, held to a system prompt's rules."""
    instructions = string(body, "instructions") or ""
    problems = validation.system_prompt_problems(instructions, path="instructions")
    if problems:
        raise invalid(f"Invalid 'instructions': {problems[0].message}.", param="instructions")
    return instructions


def _tools(value: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(the tools as the answer echoes them, as the model is sent them)."""
    if value is None:
        return [], []
    if not isinstance(value, list):
        raise wrong_type("tools", "an array", value)
    parley = _parley_tools()
    echoed: list[dict[str, Any]] = []
    sent: list[dict[str, Any]] = []
    for index, tool in enumerate(value):
        where = f"tools[{index}]"
        if not isinstance(tool, dict):
            raise wrong_type(where, "an object", tool)
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
        if parley(name) or any(other["name"] == name for other in echoed):
            raise invalid(
                f"Invalid '{where}.name': {name!r} is already a tool of this request or "
                "one of Parley's own tools.",
                param=f"{where}.name",
            )
        description = tool.get("description")
        parameters = tool.get("parameters")
        strict = tool.get("strict")
        if description is not None and not isinstance(description, str):
            raise wrong_type(f"{where}.description", "a string", description)
        if parameters is not None and not isinstance(parameters, dict):
            raise wrong_type(f"{where}.parameters", "an object", parameters)
        if strict is not None and not isinstance(strict, bool):
            raise wrong_type(f"{where}.strict", "a boolean", strict)
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


def _parley_tools() -> Callable[[str], bool]:
    """Whether a name is one of Parley's own tools: a built-in, or of a tool server's form
    `<server>__<tool>` (a client tool of that form could clash with one the conversation
    enables, so the whole form is kept for them)."""
    own = {tool["name"] for tool in tool_catalog()}
    servers = tool_server_names()

    def parley(name: str) -> bool:
        prefix, separator, _ = name.partition(TOOL_SEPARATOR)
        return name in own or bool(separator and prefix in servers)

    return parley


def _tool_named(value: Any, where: str) -> str:
    """The name of a `{type: "function", name}` choice."""
    if not isinstance(value, dict):
        raise wrong_type(where, "an object", value)
    if value.get("type") != "function":
        raise invalid(f"Invalid '{where}.type': expected 'function'.", param=f"{where}.type")
    name = value.get("name")
    if not isinstance(name, str):
        raise wrong_type(f"{where}.name", "a string", name)
    return name


def _allowed_tools(value: dict[str, Any], tools: list[dict[str, Any]]) -> tuple[str, list[str]]:
    """(the mode, the names) of an `allowed_tools` choice: each name a tool of the request
    or one of Parley's own."""
    mode = choice(value.get("mode"), "tool_choice.mode", _CHOICES) or "auto"
    listed = value.get("tools")
    if not isinstance(listed, list) or not 1 <= len(listed) <= ALLOWED_TOOLS_MAX:
        raise invalid(
            f"Invalid 'tool_choice.tools': an array of 1 to {ALLOWED_TOOLS_MAX} tools.",
            param="tool_choice.tools",
        )
    names: list[str] = []
    parley = _parley_tools()
    for index, tool in enumerate(listed):
        where = f"tool_choice.tools[{index}]"
        name = _tool_named(tool, where)
        if not any(own["name"] == name for own in tools) and not parley(name):
            raise invalid(
                f"Invalid '{where}.name': {quoted(name)!r} is neither a function in 'tools' "
                "nor one of Parley's own tools.",
                param=f"{where}.name",
            )
        if name not in names:
            names.append(name)
    return mode, names


def _tool_choice(value: Any, tools: list[dict[str, Any]]) -> tuple[Any, Any, list[str] | None]:
    """(the choice as the answer echoes it, as the model is sent it, the only tools
    offered: None for all)."""
    if value is None:
        return "auto", None, None
    if isinstance(value, str):
        if value not in _CHOICES:
            raise invalid(
                f"Invalid 'tool_choice': expected one of {', '.join(_CHOICES)}.",
                param="tool_choice",
            )
        return value, value, None
    kind = value.get("type") if isinstance(value, dict) else None
    if kind == "function":
        name = _tool_named(value, "tool_choice")
        if not any(tool["name"] == name for tool in tools):
            raise invalid(
                f"Invalid 'tool_choice.name': {quoted(name)!r} is not a function in 'tools'.",
                param="tool_choice.name",
            )
        sent = {"type": "function", "function": {"name": name}}
        return {"type": "function", "name": name}, sent, None
    if kind == "allowed_tools":
        mode, names = _allowed_tools(value, tools)
        echoed = {
            "type": "allowed_tools",
            "mode": mode,
            "tools": [{"type": "function", "name": name} for name in names],
        }
        return echoed, mode, names
    raise invalid(
        "Invalid 'tool_choice': expected 'auto', 'none', 'required', a function or allowed tools.",
        param="tool_choice",
    )


def response_request(body: dict[str, Any]) -> ResponseRequest:
    model = model_read(body)
    if "input" not in body:
        raise invalid(
            "Missing required parameter: 'input'.", param="input", code="missing_required_parameter"
        )
    read = input_read(body["input"])
    instructions = instructions_read(body)
    conversation = body.get("conversation")
    if isinstance(conversation, dict):
        conversation = conversation.get("id")
    if conversation is not None and not isinstance(conversation, str):
        raise wrong_type("conversation", "a string or {id}", conversation)
    previous = string(body, "previous_response_id")
    if conversation and previous:
        raise invalid(
            "Give 'conversation' or 'previous_response_id', not both.",
            param="previous_response_id",
        )
    echoed_tools, sent_tools = _tools(body.get("tools"))
    echoed_choice, sent_choice, allowed = _tool_choice(body.get("tool_choice"), echoed_tools)
    generation, settings_echoed = settings_read(body)
    if sent_choice is not None:
        generation["tool_choice"] = sent_choice
    if allowed is not None:
        generation["allowed_tools"] = allowed
    store = flag(body, "store", True)
    background = flag(body, "background", False)
    if background and not store:
        raise invalid("A background response must be stored: drop 'store: false'.", param="store")
    options = {
        "background": background,
        "store": store,
        "conversation": bool(conversation),
        "tools": echoed_tools,
        "tool_choice": echoed_choice,
        **settings_echoed,
    }
    ask = ResponseAsk(
        messages=read.messages,
        model=model,
        instructions=instructions,
        client_tools=sent_tools,
        generation=generation,
        metadata=_metadata(body.get("metadata")),
        options=options,
    )
    return ResponseRequest(
        ask=ask,
        input=read,
        conversation=conversation or None,
        previous_response_id=previous or None,
        stream=flag(body, "stream", False),
        background=background,
        store=store,
    )
