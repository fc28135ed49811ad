"""The model input of each call, logged at DEBUG so an operator can see what the model saw.

Messages are people's private words, so their text is logged only when the operator asks
for it with PARLEY_LOG_CONTENT=true. Otherwise the record says only how the input was made
up (roles and lengths), which is enough to see an input that grew too long or lost its
system prompt, and nothing of what was written, at any level.

Turned on with DEBUG for the `conversations.engine` logger (or LOG_LEVEL=DEBUG).
"""

import json
import logging
from typing import Any

from django.conf import settings

from conversations.engine.llm.base import GenerationSettings

log = logging.getLogger(__name__)


def model_input_log(
    where: str, *, model: str, messages: list[dict[str, Any]], generation: GenerationSettings
) -> None:
    """One DEBUG record for one model call; `where` names it (`run <id>`, `stateless chat`)."""
    if not log.isEnabledFor(logging.DEBUG):
        return
    with_text = settings.PARLEY_LOG_CONTENT
    temperature = "default" if generation.temperature is None else f"{generation.temperature:g}"
    lines = [
        f"model input for {where}: model {model}, {len(messages)} messages, "
        f"max_output_tokens {generation.max_output_tokens}, temperature {temperature}"
    ]
    lines += [_describe(index, message, with_text) for index, message in enumerate(messages)]
    log.debug("\n".join(lines))


def _describe(index: int, message: dict[str, Any], with_text: bool) -> str:
    text = _text(message.get("content"))
    line = f"  [{index}] {message.get('role')} ({len(text)} chars)"
    calls = [call for call in message.get("tool_calls") or [] if isinstance(call, dict)]
    if calls:
        line += f", {len(calls)} tool calls"
    if not with_text:
        return line
    if text:
        # JSON-quoted: one line per message however many lines the text has.
        line += ": " + json.dumps(text, ensure_ascii=False)
    for call in calls:
        function = call.get("function") or {}
        line += f"\n      call {function.get('name')}({function.get('arguments', '')})"
    return line


def _text(content: Any) -> str:
    if isinstance(content, list):  # content parts
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return str(content or "")
