"""Reading a conversation in: all or nothing, every problem reported by its JSON path.

Three forms are accepted:

- Parley's own export (`parley.conversation`, versions 1 and 2): read back exactly.
- A minimal document written elsewhere: `{"messages": [{"role", "content"}, ...]}`, with
  optional `tool_calls`, `tool_call_id` and `name` per message and optional `title`,
  `system_prompt`, `model` and `metadata` beside the messages.
- One line of OpenAI's chat fine-tuning JSONL (`{"messages": [...]}`, tool calls as
  `{"id", "type": "function", "function": {"name", "arguments"}}`), which is the
  minimal form too; our own JSONL export reads back through it.

What the short forms leave out is generated: ids, sequence numbers, times (the import's
own, a microsecond apart so the order holds), a leading system message becomes the
system prompt and later ones stored context events, the title comes from the first user
message. The meaning is checked as strictly as for an export: roles, every tool result
answering an earlier call, lengths, storable text.
"""

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import timedelta
from typing import Annotated, Any, Literal
from uuid import UUID, uuid4

from django.conf import settings
from django.utils import timezone
from pydantic import AwareDatetime, BaseModel, ConfigDict, Field
from pydantic import ValidationError as PydanticValidationError

from conversations import validation
from conversations.errors import INVALID_JSON, Problem, ValidationFailed
from conversations.formats.exporting import FORMAT, VERSION
from conversations.formats.import_checks import (
    conversation_problems,
    message_problems,
    tree_problems,
)
from conversations.json_input import JsonInputError, is_too_deep, json_parse, json_problems
from conversations.models import default_tools

Role = Literal["user", "assistant", "tool", "system"]
Kind = Literal["message", "event", "draft_edit", "compaction"]
READ_VERSIONS = (1, 2)
SHA256_PATTERN = r"^[0-9a-f]{64}$"


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


class ImportedAttachment(_Strict):
    """A file a message carries, named by its bytes' sha256: an import links the message to
    the importing user's file holding those bytes (brought in a ZIP, or already theirs).
    `id` and `content_type` are the exporting side's; the type is decided again from the
    bytes."""

    id: UUID
    filename: str
    content_type: str
    size: Annotated[int, Field(ge=0)]
    sha256: Annotated[str, Field(pattern=SHA256_PATTERN)]


class ImportedMessageV2(ImportedMessage):
    reasoning: str
    reasoning_ms: int | None
    # Absent in documents written before branches: every message is on the root then.
    branch_id: UUID | None = None
    # Absent in documents written before files.
    attachments: list[ImportedAttachment] = []


class ImportedBranch(_Strict):
    id: UUID
    parent_id: UUID | None
    fork_seq: int
    created_at: AwareDatetime


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


class ImportedConversationV2(ImportedConversation):
    temperature: float | None
    max_output_tokens: int | None
    active_branch_id: UUID | None = None
    # Exports made before images went to the model lack it: the default.
    vision: bool = True
    # Exports made before organising lack them: untagged, unpinned, in no folder. Tags
    # and the folder are names, found among the importer's own or made.
    tags: list[str] = []
    pinned: bool = False
    folder: str | None = None


class ImportedDocument(_Strict):
    format: str
    version: Literal[1]
    exported_at: AwareDatetime
    conversation: ImportedConversation
    messages: list[ImportedMessage]


class ImportedDocumentV2(_Strict):
    format: str
    version: Literal[2]
    exported_at: AwareDatetime
    conversation: ImportedConversationV2
    # Root first, each parent before its children; absent: one line (the root).
    branches: list[ImportedBranch] | None = None
    messages: list[ImportedMessageV2]


@dataclass(frozen=True)
class ParsedExport:
    conversation: ImportedConversation
    messages: list[ImportedMessage]
    # None for a document with one line of messages.
    branches: list[ImportedBranch] | None = None

    @property
    def active_branch_id(self) -> UUID | None:
        return getattr(self.conversation, "active_branch_id", None)


def _path(location: Iterable[int | str]) -> str:
    path = "$"
    for part in location:
        path += f"[{part}]" if isinstance(part, int) else f".{part}"
    return path


def parse_export(document: bytes | str) -> ParsedExport:
    """Validate a document completely. Raise ValidationFailed with every problem."""
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
        raise ValidationFailed([Problem(exc.path, exc.message)], INVALID_JSON) from None
    # Every unstorable text is reported with the rest; too deep a document goes no further.
    unstorable = json_problems(data)
    text_problems = [Problem(p.path, p.message) for p in unstorable]
    if any(is_too_deep(problem) for problem in unstorable):
        raise ValidationFailed(text_problems, INVALID_JSON)
    try:
        return _document_parse(raw, data, text_problems)
    except ValidationFailed as exc:
        # Text no database can store makes the document unacceptable JSON, as in any body.
        if text_problems:
            raise ValidationFailed(exc.problems, INVALID_JSON) from None
        raise


def _document_parse(raw: bytes, data: Any, text_problems: list[Problem]) -> ParsedExport:
    """The format's checks, with the text problems already found reported first."""
    if not isinstance(data, dict):
        raise ValidationFailed([Problem("$", "must be an object")])
    messages = data.get("messages")
    max_messages = settings.PARLEY_IMPORT_MAX_MESSAGES
    if isinstance(messages, list) and len(messages) > max_messages:
        raise ValidationFailed(
            [Problem("$.messages", f"has {len(messages)} messages; the limit is {max_messages}")]
        )
    if "format" not in data and "version" not in data:
        parsed = _short_form(data, text_problems)
    else:
        parsed = _export_form(raw, data, text_problems)
    shape = (
        tree_problems(parsed.branches, parsed.messages, active=parsed.active_branch_id)
        if parsed.branches is not None
        else message_problems(parsed.messages)
    )
    problems = text_problems + [
        problem
        for problem in conversation_problems(parsed.conversation) + shape
        if problem not in text_problems
    ]
    if problems:
        raise ValidationFailed(problems)
    return parsed


def _export_form(raw: bytes, data: dict[str, Any], text_problems: list[Problem]) -> ParsedExport:
    if data.get("format") != FORMAT:
        found = data.get("format")
        raise ValidationFailed(
            [*text_problems, Problem("$.format", f"must be {FORMAT!r}, got {found!r}")]
        )
    version = data.get("version")
    if isinstance(version, bool) or version not in READ_VERSIONS:
        known = " and ".join(str(v) for v in READ_VERSIONS)
        message = f"unsupported version {version!r}; this server reads {known} (writes {VERSION})"
        raise ValidationFailed([*text_problems, Problem("$.version", message)])
    model = ImportedDocumentV2 if version == 2 else ImportedDocument
    try:
        parsed = model.model_validate_json(raw, strict=True)
    except PydanticValidationError as exc:
        raise ValidationFailed(
            text_problems + [Problem(_path(error["loc"]), error["msg"]) for error in exc.errors()]
        ) from None
    return ParsedExport(
        conversation=parsed.conversation,
        messages=list(parsed.messages),
        branches=getattr(parsed, "branches", None),
    )


# --- the short forms ---------------------------------------------------------------------


class _ShortToolCall(_Strict):
    id: str
    name: str
    arguments: str


class _OpenAIFunction(_Strict):
    name: str
    arguments: str


class _OpenAIToolCall(_Strict):
    id: str
    type: Literal["function"]
    function: _OpenAIFunction


class _TextPart(_Strict):
    type: Literal["text"]
    text: str


class _ShortMessage(_Strict):
    role: Role
    # OpenAI's format leaves it out (or null) on an assistant message that only calls tools,
    # and may give it as a list of text parts.
    content: str | list[_TextPart] | None = None
    tool_calls: list[_ShortToolCall | _OpenAIToolCall] = []
    tool_call_id: str | None = None
    name: str | None = None
    # Fine-tuning lines may weigh an assistant message; it means nothing here.
    weight: Literal[0, 1] | None = None


class _ShortDocument(_Strict):
    messages: list[_ShortMessage]
    title: str | None = None
    system_prompt: str | None = None
    model: str = ""
    metadata: dict[str, Any] = {}
    # Fine-tuning lines may list the functions the model could call; the conversation
    # keeps its own tool settings (the server's defaults) instead.
    tools: list[Any] | None = None
    parallel_tool_calls: bool | None = None


def _short_form(data: dict[str, Any], text_problems: list[Problem]) -> ParsedExport:
    try:
        short = _ShortDocument.model_validate(data, strict=True)
    except PydanticValidationError as exc:
        raise ValidationFailed(
            text_problems + [Problem(_path(error["loc"]), error["msg"]) for error in exc.errors()]
        ) from None
    messages = list(short.messages)
    system_prompt = short.system_prompt
    if system_prompt is None and messages and messages[0].role == "system":
        # The leading system message is the preamble, sent fresh with every call.
        system_prompt = _text(messages.pop(0).content)
    start = timezone.now()
    imported = [
        ImportedMessage(
            id=uuid4(),
            seq=index + 1,
            role=message.role,
            # A system message inside the history is a stored context event.
            kind="event" if message.role == "system" else "message",
            content=_text(message.content),
            tool_calls=[_call(call) for call in message.tool_calls],
            tool_call_id=message.tool_call_id,
            name=message.name,
            created_at=start + timedelta(microseconds=index),
            run_id=None,
            usage=None,
            provider_payload=None,
        )
        for index, message in enumerate(messages)
    ]
    first_user = next((m.content for m in imported if m.role == "user"), "")
    conversation = ImportedConversation(
        id=uuid4(),
        title=short.title if short.title is not None else validation.title_from_message(first_user),
        system_prompt=system_prompt or "",
        model=short.model,
        tools=default_tools(),
        metadata=short.metadata,
        draft="",
        created_at=start,
        updated_at=start,
        forked_from=None,
    )
    return ParsedExport(conversation=conversation, messages=imported)


def _text(content: str | list[_TextPart] | None) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "".join(part.text for part in content)


def _call(call: _ShortToolCall | _OpenAIToolCall) -> ImportedToolCall:
    if isinstance(call, _OpenAIToolCall):
        return ImportedToolCall(
            id=call.id, name=call.function.name, arguments=call.function.arguments
        )
    return ImportedToolCall(id=call.id, name=call.name, arguments=call.arguments)
