"""Export and import formats.

- JSON v1 (`parley.conversation`): the lossless format; import reads it back exactly.
- Markdown: for people.
- JSONL: one conversation per line in OpenAI's chat fine-tuning format.

Exports stream: messages are read in seq order in chunks and written as they come, so
memory stays flat however long the conversation is.
"""

import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal
from uuid import UUID

from django.conf import settings
from django.utils import timezone
from pydantic import AwareDatetime, BaseModel, ConfigDict
from pydantic import ValidationError as PydanticValidationError

from conversations import validation
from conversations.context import StoredMessage, history_units
from conversations.errors import Problem, ValidationFailed
from conversations.json_input import JsonInputError, is_too_deep, json_parse, json_problems
from conversations.models import Conversation, Message
from conversations.serializers import conversation_export_dict, message_export_dict
from conversations.tools.registry import tool_names_problems

FORMAT = "parley.conversation"
VERSION = 1
READ_CHUNK = 2000
Role = Literal["user", "assistant", "tool", "system"]
Kind = Literal["message", "event", "draft_edit"]


# --- JSON v1 export ------------------------------------------------------------------


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
    """The JSON v1 document, as text chunks (one per message) for a streamed download."""
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
    """The JSON v1 document as a dict (small conversations, tests)."""
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


# --- JSON v1 import ------------------------------------------------------------------


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class ImportedToolCall(_Strict):
    id: str
    name: str
    arguments: str


class ImportedMessage(_Strict):
    id: UUID
    seq: int
    role: Role
    kind: Kind
    content: str
    tool_calls: list[ImportedToolCall]
    tool_call_id: str | None
    name: str | None
    created_at: AwareDatetime
    run_id: UUID | None
    usage: dict[str, Any] | None
    provider_payload: dict[str, Any] | None


class ImportedConversation(_Strict):
    id: UUID
    title: str
    system_prompt: str
    model: str
    tools: list[str]
    metadata: dict[str, Any]
    draft: str
    created_at: AwareDatetime
    updated_at: AwareDatetime
    forked_from: UUID | None


class ImportedDocument(_Strict):
    format: str
    version: int
    exported_at: AwareDatetime
    conversation: ImportedConversation
    messages: list[ImportedMessage]


@dataclass(frozen=True)
class ParsedExport:
    conversation: ImportedConversation
    messages: list[ImportedMessage]


def _path(location: Iterable[int | str]) -> str:
    path = "$"
    for part in location:
        path += f"[{part}]" if isinstance(part, int) else f".{part}"
    return path


def parse_export(document: bytes | str) -> ParsedExport:
    """Validate an export document completely. Raise ValidationFailed with every problem."""
    try:
        raw = document.encode() if isinstance(document, str) else document
    except UnicodeEncodeError as exc:
        # A str can hold lone surrogates, which no UTF-8 document (and no database) can.
        raise ValidationFailed([Problem("$", f"not valid text: {exc.reason}")]) from None
    limit = settings.PARLEY_IMPORT_MAX_BYTES
    if len(raw) > limit:
        raise ValidationFailed(
            [Problem("$", f"document is {len(raw)} bytes; the limit is {limit}")]
        )
    try:
        data = json_parse(raw, check=False)
    except JsonInputError as exc:
        raise ValidationFailed([Problem(exc.path, exc.message)], code="invalid_json") from None
    # Every unstorable text is reported with the rest; too deep a document goes no further.
    unstorable = json_problems(data)
    text_problems = [Problem(p.path, p.message) for p in unstorable]
    if any(is_too_deep(problem) for problem in unstorable):
        raise ValidationFailed(text_problems, code="invalid_json")
    try:
        return _document_parse(raw, data, text_problems)
    except ValidationFailed as exc:
        # Text no database can store makes the document unacceptable JSON, as in any body.
        if text_problems:
            exc.code = "invalid_json"
        raise


def _document_parse(raw: bytes, data: Any, text_problems: list[Problem]) -> ParsedExport:
    """The format's checks, with the text problems already found reported first."""
    if not isinstance(data, dict):
        raise ValidationFailed([Problem("$", "must be an object")])
    if data.get("format") != FORMAT:
        found = data.get("format")
        raise ValidationFailed(
            [*text_problems, Problem("$.format", f"must be {FORMAT!r}, got {found!r}")]
        )
    if data.get("version") != VERSION or isinstance(data.get("version"), bool):
        version = data.get("version")
        message = f"unsupported version {version!r}; this server reads {VERSION}"
        raise ValidationFailed([*text_problems, Problem("$.version", message)])
    messages = data.get("messages")
    max_messages = settings.PARLEY_IMPORT_MAX_MESSAGES
    if isinstance(messages, list) and len(messages) > max_messages:
        raise ValidationFailed(
            [Problem("$.messages", f"has {len(messages)} messages; the limit is {max_messages}")]
        )
    try:
        parsed = ImportedDocument.model_validate_json(raw, strict=True)
    except PydanticValidationError as exc:
        raise ValidationFailed(
            text_problems + [Problem(_path(error["loc"]), error["msg"]) for error in exc.errors()]
        ) from None
    problems = text_problems + [
        problem
        for problem in _conversation_problems(parsed.conversation)
        + _message_problems(parsed.messages)
        if problem not in text_problems
    ]
    if problems:
        raise ValidationFailed(problems)
    return ParsedExport(conversation=parsed.conversation, messages=parsed.messages)


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


def _conversation_problems(conversation: ImportedConversation) -> list[Problem]:
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
    )


def _message_problems(messages: list[ImportedMessage]) -> list[Problem]:
    problems: list[Problem] = []
    pending: dict[str, int] = {}  # unanswered call id -> seq of the assistant message
    for index, message in enumerate(messages):
        path = f"$.messages[{index}]"
        if message.seq != index + 1:
            problems.append(
                Problem(f"{path}.seq", f"is {message.seq}; expected {index + 1} (gapless from 1)")
            )
        problems += validation.content_problems(message.content, path=f"{path}.content")
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
