"""The offline demo model, used when no OPENAI_API_KEY is configured.

Deterministic (the same input gives the same output, call ids included), it streams token
by token at a model-like pace and calls the built-in tools when asked, so the whole tool
loop can be tried without network access or an account.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import re
from collections.abc import AsyncGenerator
from datetime import datetime
from typing import Any

from django.conf import settings

from conversations.engine.llm.base import (
    Finished,
    GenerationSettings,
    StreamEvent,
    TextDelta,
    ToolCallArgumentsDelta,
    ToolCallStarted,
    UsageReported,
)

_WORDS_AS_OPERATORS = (
    (re.compile(r"\s*\b(?:multiplied by|times)\b\s*", re.I), "*"),
    (re.compile(r"\s*\bdivided by\b\s*", re.I), "/"),
    (re.compile(r"\s*\bplus\b\s*", re.I), "+"),
    (re.compile(r"\s*\bminus\b\s*", re.I), "-"),
    (re.compile(r"(?<=\d)\s*[x\u00d7]\s*(?=\d)"), "*"),
    (re.compile(r"\u00f7"), "/"),
    (re.compile(r"\^"), "**"),
)
_EXPRESSION_RUN = re.compile(r"[\d.()+\-*/%\s]+")
_BINARY_OPERATION = re.compile(r"\d\s*\)*\s*(?:\*\*|//|[-+*/%])\s*\(*\s*-?\d")
_ARITHMETIC_WORDS = re.compile(
    r"\b(?:calculate|compute|evaluate|solve|what is|what's|how much)\b", re.I
)
_TIME_WORDS = re.compile(r"\b(?:time|date|today|clock|what day)\b", re.I)
_TIMEZONE = re.compile(r"\b(UTC|GMT|[A-Z][A-Za-z]+/[A-Z][A-Za-z_]+(?:/[A-Z][A-Za-z_]+)?)\b")
_DRAFT_REQUESTS = (
    re.compile(r"\bdraft\s*:\s*(?P<text>.+)", re.I | re.S),
    re.compile(
        r"\b(?:update|change|set|replace|rewrite|write)\s+(?:the\s+|my\s+|our\s+)?draft\s+"
        r"(?:to|as|with|into)\s*:?\s*(?P<text>.+)",
        re.I | re.S,
    ),
)


class DemoProvider:
    name = "demo"

    def __init__(self, *, tokens_per_second: float | None = None) -> None:
        if tokens_per_second is None:
            tokens_per_second = getattr(settings, "PARLEY_DEMO_TOKENS_PER_SECOND", 40.0)
        self.tokens_per_second = float(tokens_per_second)

    async def stream(
        self,
        *,
        model: str,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        generation: GenerationSettings | None = None,
    ) -> AsyncGenerator[StreamEvent, None]:
        # Like a real model, the demo stops where the reply's token limit is reached
        # (`length`), so the limit can be tried offline too. Each piece streamed is a token.
        limit = (generation or GenerationSettings.effective()).max_output_tokens
        offered = {
            tool["function"]["name"]: tool["function"]
            for tool in tools
            if tool.get("type") == "function" and isinstance(tool.get("function"), dict)
        }
        call = _tool_call_for(messages, offered)
        if call is None:
            pieces: list[StreamEvent] = [
                TextDelta(token)
                for token in re.findall(r"\S+\s*|\s+", _reply_text(messages, offered))
            ]
            reason = "stop"
        else:
            name, arguments = call
            call_id = "call_demo" + _digest(messages)[:24]
            size = max(1, math.ceil(len(arguments) / 3))  # streamed in pieces, as models do
            pieces = [ToolCallStarted(index=0, call_id=call_id, name=name)]
            pieces += [
                ToolCallArgumentsDelta(call_id, arguments[start : start + size])
                for start in range(0, len(arguments), size)
            ]
            reason = "tool_calls"
        if len(pieces) > limit:
            pieces, reason = pieces[:limit], "length"
        for piece in pieces:
            await self._pause()
            yield piece
        prompt_tokens = max(1, len(json.dumps([messages, tools], default=str)) // 4)
        completion_tokens = len(pieces)
        yield UsageReported(prompt_tokens, completion_tokens, prompt_tokens + completion_tokens)
        yield Finished(reason)

    async def _pause(self) -> None:
        if self.tokens_per_second > 0:
            await asyncio.sleep(1.0 / self.tokens_per_second)


def _tool_call_for(
    messages: list[dict[str, Any]], offered: dict[str, dict[str, Any]]
) -> tuple[str, str] | None:
    """The tool the last user message asks for, as (name, arguments JSON), if offered."""
    last = _last_conversational(messages)
    if last is None or last.get("role") != "user":
        return None  # after tool results the demo always answers in text: the loop ends
    text = _text_of(last)
    draft = _draft_request(text)
    if draft is not None and "update_draft" in offered:
        key = _argument_name(offered["update_draft"], "draft")
        return "update_draft", json.dumps({key: draft})
    expression = _arithmetic_request(text)
    if expression is not None and "calculator" in offered:
        key = _argument_name(offered["calculator"], "expression")
        return "calculator", json.dumps({key: expression})
    if _TIME_WORDS.search(text) and "current_time" in offered:
        zone = _TIMEZONE.search(text)
        properties = offered["current_time"].get("parameters", {}).get("properties", {})
        if zone is not None and "timezone" in properties:
            return "current_time", json.dumps({"timezone": zone.group(1)})
        return "current_time", "{}"
    return None


def _reply_text(messages: list[dict[str, Any]], offered: dict[str, dict[str, Any]]) -> str:
    last = _last_conversational(messages)
    if last is not None and last.get("role") == "tool":
        return _answer_from_tool_results(messages)
    request = " ".join(_text_of(last).split()) if last is not None else ""
    summary = request if len(request) <= 120 else request[:119] + "…"
    lines = [
        "**Offline demo model.** Parley has no `OPENAI_API_KEY`, so this reply comes from "
        "its built-in demo model, not a real LLM.",
        "",
        f"You wrote {len(request.split())} words:" if request else "Your message was empty.",
    ]
    if summary:
        lines += ["", f"> {summary}"]
    examples = {
        "calculator": "`what is 12*7`",
        "current_time": "`what time is it?`",
        "update_draft": "`update the draft to: Hello`",
    }
    tried = [example for name, example in examples.items() if name in offered]
    if tried:
        lines += ["", "To see a tool call, try " + ", ".join(tried) + "."]
    lines += [
        "",
        "To chat with a real model, set `OPENAI_API_KEY` (and `OPENAI_BASE_URL` for any "
        "OpenAI-compatible server such as vLLM, Ollama or llama.cpp), then restart Parley.",
    ]
    return "\n".join(lines)


def _answer_from_tool_results(messages: list[dict[str, Any]]) -> str:
    names_by_call_id = {
        call.get("id"): (call.get("function") or {}).get("name") or call.get("name")
        for message in messages
        if message.get("role") == "assistant"
        for call in message.get("tool_calls") or []
    }
    results: list[dict[str, Any]] = []
    for message in reversed(messages):
        if message.get("role") == "system":
            continue  # trailing context such as the current draft
        if message.get("role") != "tool":
            break
        results.insert(0, message)
    sentences = []
    for result in results:
        name = result.get("name") or names_by_call_id.get(result.get("tool_call_id"), "")
        output = _text_of(result).strip()
        sentences.append(_sentence_for(str(name or "the tool"), output))
    return " ".join(sentences) or "The tool returned nothing."


def _sentence_for(name: str, output: str) -> str:
    if name == "calculator":
        try:
            return f"The result is {json.loads(output)}."
        except (ValueError, TypeError):
            return f"The calculator could not work that out: {output}"
    if name == "current_time":
        try:
            moment = datetime.fromisoformat(output.strip('"'))
        except ValueError:
            return f"I could not read the clock: {output}"
        return f"It is {moment:%H:%M} on {moment:%A, %d %B %Y} (UTC offset {moment:%z})."
    if name == "update_draft":
        return f"Done, I updated the draft. ({output})"
    return f"The tool {name} returned: {output[:300]}"


def _last_conversational(messages: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The last message that is not a system message (the draft context comes last)."""
    for message in reversed(messages):
        if message.get("role") != "system":
            return message
    return None


def _text_of(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):  # content parts
        return " ".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return str(content or "")


def _draft_request(text: str) -> str | None:
    for pattern in _DRAFT_REQUESTS:
        match = pattern.search(text)
        if match is not None:
            draft = match.group("text").strip().strip("\"'“”").strip()
            return draft or None
    return None


def _arithmetic_request(text: str) -> str | None:
    normalised = text
    for pattern, operator in _WORDS_AS_OPERATORS:
        normalised = pattern.sub(operator, normalised)
    runs = [run.strip(" .") for run in _EXPRESSION_RUN.findall(normalised)]
    candidates = [run for run in runs if _BINARY_OPERATION.search(run)]
    if not candidates:
        return None
    expression = max(candidates, key=len)
    if expression.count("(") != expression.count(")"):
        expression = expression.strip("()").strip()
    # A bare expression is a request; inside prose it needs a word like "calculate".
    is_request = _ARITHMETIC_WORDS.search(text) or len(expression) >= len(text.strip()) / 2
    return expression if is_request else None


def _argument_name(function: dict[str, Any], preferred: str) -> str:
    """The tool's parameter for the main argument: `preferred` unless its schema differs."""
    parameters = function.get("parameters") or {}
    properties = parameters.get("properties") or {}
    if not properties or preferred in properties:
        return preferred
    required = parameters.get("required") or []
    return str(required[0] if required else next(iter(properties)))


def _digest(messages: list[dict[str, Any]]) -> str:
    canonical = json.dumps(messages, sort_keys=True, default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()
