"""Export formats (import is formats/importing.py).

- JSON (`parley.conversation`, version 2): the lossless format; import reads it back
  exactly. Version 2 added each message's reasoning and the generation settings.
- Markdown: for people.
- JSONL: one conversation per line in OpenAI's chat fine-tuning format.

Exports stream: messages are read in seq order in chunks and written as they come, so
memory stays flat however long the conversation is.
"""

import json
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from django.utils import timezone

from conversations import validation
from conversations.context import StoredMessage, history_units
from conversations.models import Conversation, Message
from conversations.serializers import conversation_export_dict, message_export_dict

FORMAT = "parley.conversation"
VERSION = 2
READ_CHUNK = 2000


# --- JSON export ------------------------------------------------------------------


def _messages(conversation: Conversation) -> Iterator[Message]:
    return (
        Message.objects.filter(conversation=conversation)
        .order_by("seq")
        .iterator(chunk_size=READ_CHUNK)
    )


def _dumps(value: Any) -> str:
    # Repaired, so a row stored before text was checked still exports (and imports back).
    return json.dumps(validation.storable_json(value), ensure_ascii=False)


def export_json_chunks(conversation: Conversation) -> Iterator[str]:
    """The JSON document, as text chunks (one per message) for a streamed download."""
    head = {
        "format": FORMAT,
        "version": VERSION,
        "exported_at": timezone.now().isoformat(),
        "conversation": conversation_export_dict(conversation),
    }
    yield _dumps(head)[:-1] + ', "messages": ['
    separator = ""
    for message in _messages(conversation):
        yield separator + _dumps(message_export_dict(message))
        separator = ", "
    yield "]}"


def export_json(conversation: Conversation) -> dict[str, Any]:
    """The JSON document as a dict (small conversations, tests)."""
    document: dict[str, Any] = json.loads("".join(export_json_chunks(conversation)))
    return document


# --- Markdown ------------------------------------------------------------------------


def _fence(text: str) -> str:
    """A code fence longer than any backtick run inside `text`, so it cannot be closed early."""
    longest, run = 0, 0
    for char in text:
        run = run + 1 if char == "`" else 0
        longest = max(longest, run)
    return "`" * max(3, longest + 1)


def _block(text: str, language: str = "") -> str:
    fence = _fence(text)
    return f"{fence}{language}\n{text}\n{fence}"


def _markdown_message(message: Message) -> str:
    when = message.created_at.strftime("%Y-%m-%d %H:%M UTC")
    if message.kind == Message.Kind.EVENT:
        return f"> **Context event** · {when}\n>\n> " + message.content.replace("\n", "\n> ")
    if message.kind == Message.Kind.DRAFT_EDIT:
        return f"> **Draft edited by the user** · {when}\n\n" + _block(message.content)
    if message.role == Message.Role.TOOL:
        label = f"`{message.name}`" if message.name else "tool"
        return f"**Tool result** ({label}) · {when}\n\n" + _block(message.content, "text")
    heading = {"user": "User", "assistant": "Assistant", "system": "System"}[message.role]
    parts = [f"### {heading} · {when}"]
    if message.content:
        parts.append(message.content)
    for call in message.tool_calls:
        parts.append(f"**Tool call** `{call['name']}`\n\n" + _block(call["arguments"], "json"))
    return "\n\n".join(parts)


def export_markdown_chunks(conversation: Conversation) -> Iterator[str]:
    title = conversation.title or "Untitled conversation"
    lines = [f"# {title}", ""]
    lines.append(f"- Created: {conversation.created_at.strftime('%Y-%m-%d %H:%M UTC')}")
    if conversation.model:
        lines.append(f"- Model: {conversation.model}")
    lines.append(f"- Messages: {conversation.message_count}")
    yield "\n".join(lines) + "\n\n"
    if conversation.system_prompt:
        yield "## System prompt\n\n" + _block(conversation.system_prompt) + "\n\n"
    if conversation.draft:
        yield "## Draft\n\n" + _block(conversation.draft) + "\n\n"
    yield "## Transcript\n\n"
    for message in _messages(conversation):
        yield _markdown_message(message) + "\n\n---\n\n"


# --- JSONL (OpenAI chat fine-tuning) -------------------------------------------------


def jsonl_line(system_prompt: str, history: Sequence[StoredMessage]) -> str:
    """One conversation as a `{"messages": [...]}` line, the system prompt first."""
    chat = []
    if system_prompt:
        chat.append({"role": "system", "content": system_prompt})
    # Same grouping as the model input: tool results right after their call, context
    # events that arrived while tools ran moved after the results.
    units = history_units(history)
    chat.extend(message for unit in units for message in unit)
    return _dumps({"messages": chat}) + "\n"


def export_jsonl_lines(conversations: Iterable[Conversation]) -> Iterator[str]:
    """One line per conversation (see conversations/formats/archives.py for many at once)."""
    for conversation in conversations:
        yield jsonl_line(conversation.system_prompt, list(_messages(conversation)))
