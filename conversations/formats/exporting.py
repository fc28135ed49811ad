"""Export formats (import is formats/importing.py).

- JSON (`parley.conversation`, version 2): the lossless format; import reads it back
  exactly. Version 2 added each message's reasoning, the generation settings and the
  branches: every branch with its fork point, each message's branch, the active branch.
  Version 1 (asked for explicitly) is the active branch's path as one line.
- Markdown: for people: the active path, with the other versions at each fork point
  listed briefly where they branch off.
- JSONL: one conversation per line in OpenAI's chat fine-tuning format (the active path).

Exports stream: messages are read in seq order in chunks and written as they come, so
memory stays flat however long the conversation is.
"""

import functools
import itertools
import json
import operator
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from django.db.models import Q
from django.utils import timezone

from conversations import validation
from conversations.context import StoredMessage, history_units
from conversations.models import Branch, Conversation, Message
from conversations.selectors.branches import (
    BRANCH_FIELDS,
    alternatives_at,
    branch_active,
    path_messages,
)
from conversations.serializers import (
    branch_export_dict,
    conversation_export_dict,
    message_export_dict,
)

FORMAT = "parley.conversation"
VERSION = 2
# What version 2 added, left out of a version 1 document.
V2_CONVERSATION_FIELDS = ("temperature", "max_output_tokens", "active_branch_id")
V2_MESSAGE_FIELDS = ("reasoning", "reasoning_ms", "branch_id")
READ_CHUNK = 2000


# --- JSON export ------------------------------------------------------------------


def _messages(conversation: Conversation) -> Iterator[Message]:
    """The active branch's path, in order."""
    branch = branch_active(conversation=conversation)
    return path_messages(branch, after=0, last=branch.message_count).iterator(chunk_size=READ_CHUNK)


def _branches(conversation: Conversation) -> list[dict[str, Any]]:
    """Every branch, each parent before its children: by depth, then age."""
    rows = Branch.objects.filter(conversation=conversation).values(*BRANCH_FIELDS, "lineage")
    return sorted(rows, key=lambda r: (len(r["lineage"]), r["created_at"], str(r["id"])))


def _dumps(value: Any) -> str:
    # Repaired, so a row stored before text was checked still exports (and imports back).
    return json.dumps(validation.storable_json(value), ensure_ascii=False)


def export_json_chunks(conversation: Conversation, *, version: int = VERSION) -> Iterator[str]:
    """The JSON document, as text chunks (one per message) for a streamed download:
    every branch in version 2, the active path alone in version 1."""
    head: dict[str, Any] = {
        "format": FORMAT,
        "version": version,
        "exported_at": timezone.now().isoformat(),
        "conversation": conversation_export_dict(conversation),
    }
    if version == 1:
        for name in V2_CONVERSATION_FIELDS:
            head["conversation"].pop(name)
        messages: Iterable[Message] = _messages(conversation)
    else:
        branches = _branches(conversation)
        head["branches"] = [branch_export_dict(row) for row in branches]
        messages = (
            message
            for row in branches
            for message in Message.objects.filter(branch_id=row["id"])
            .order_by("seq")
            .iterator(chunk_size=READ_CHUNK)
        )
    yield _dumps(head)[:-1] + ', "messages": ['
    separator = ""
    for message in messages:
        row = message_export_dict(message)
        if version == 1:
            for name in V2_MESSAGE_FIELDS:
                row.pop(name)
        yield separator + _dumps(row)
        separator = ", "
    yield "]}"


def export_json(conversation: Conversation, *, version: int = VERSION) -> dict[str, Any]:
    """The JSON document as a dict (small conversations, tests)."""
    chunks = export_json_chunks(conversation, version=version)
    document: dict[str, Any] = json.loads("".join(chunks))
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
    branch = branch_active(conversation=conversation)
    lines.append(f"- Messages: {branch.message_count}")
    yield "\n".join(lines) + "\n\n"
    if conversation.system_prompt:
        yield "## System prompt\n\n" + _block(conversation.system_prompt) + "\n\n"
    if conversation.draft:
        yield "## Draft\n\n" + _block(conversation.draft) + "\n\n"
    yield "## Transcript\n\n"
    for chunk in _batched(_messages(conversation), READ_CHUNK):
        # With the count, a conversation of one branch costs no alternatives query (the
        # admin's Markdown ZIP exports many conversations, most of one branch).
        choices = alternatives_at(
            branch, [m.seq for m in chunk], branch_count=conversation.branch_count
        )
        others = _other_versions(choices)
        for message in chunk:
            yield _markdown_message(message) + "\n\n"
            alternatives = choices.get(message.seq)
            if alternatives:
                yield _alternatives_note(message.seq, alternatives, others) + "\n\n"
            yield "---\n\n"


PREVIEW_CHARS = 80


def _batched(items: Iterable[Message], size: int) -> Iterator[list[Message]]:
    iterator = iter(items)
    while batch := list(itertools.islice(iterator, size)):
        yield batch


def _other_versions(choices: dict[int, dict[str, Any] | None]) -> dict[tuple[str, int], str]:
    """The opening words of every alternative at these seqs, in one query."""
    wanted = [
        Q(branch_id=key, seq=seq)
        for seq, alternatives in choices.items()
        if alternatives
        for key in alternatives["branch_ids"]
    ]
    if not wanted:
        return {}
    rows = Message.objects.filter(functools.reduce(operator.or_, wanted))
    return {
        (str(branch), seq): " ".join(content.split())[:PREVIEW_CHARS]
        for branch, seq, content in rows.values_list("branch_id", "seq", "content")
    }


def _alternatives_note(
    seq: int, alternatives: dict[str, Any], others: dict[tuple[str, int], str]
) -> str:
    index, count = alternatives["index"], alternatives["count"]
    lines = [f"> *Version {index + 1} of {count} at this point. The others:*"]
    for position, key in enumerate(alternatives["branch_ids"]):
        if position != index:
            preview = others.get((key, seq), "")
            lines.append(f"> - {position + 1} (branch `{key[:8]}`): {preview or '(empty)'}")
    return "\n".join(lines)


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
