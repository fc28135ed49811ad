"""The model's input, built from stored state. Pure functions: no database, no clock.

    [system_prompt] + history (newest that fits the token budget) + [current draft]

- The system prompt is the preamble: sent fresh on every call, never a history row, so
  changing it applies from the next turn on.
- Context events and draft-edit notices are stored system messages and appear in order.
- The current draft goes last as `[current draft: "..."]`, rebuilt every call and never
  stored, so the model always knows the draft even many turns after an edit.
- What a reasoning model thought (`Message.reasoning`) is never sent back: a message is
  sent as its role, content and tool calls only (HistoryMessage has no other field).
- A compaction (a stored summary of earlier turns) stands in for the turns it covers: the
  newest one leaves out every message before it up to the seq its payload names
  (`covers_seq`), and each is sent as a system message headed SUMMARY_HEAD. The stored
  turns stay as they were; only the model's input leaves them out.
- Truncation drops whole units from the oldest end: an assistant message that called tools
  and all of its results form one unit, because the chat API rejects a tool result
  without its call and a call without its results.
- Files attached to a message go before its text: images as image parts (base64 data URLs,
  so any OpenAI-compatible server takes them) or, for a model that reads text only, as
  `[image: name, WxH]`; text files and PDFs as their text headed `[file: name]`. The text
  of a message's files may take half the token budget, shared between them; what does not
  fit is cut, and the cut is said. A message without images keeps plain string content,
  which every server takes.

Token estimate: 4 characters per token plus 4 tokens of framing per message, and a flat
IMAGE_TOKENS an image. It is deliberately simple and provider-independent: English
averages about 4 characters per token with OpenAI's tokenizers, the framing matches their
per-message overhead, and an image costs them several hundred tokens in detail. Set
PARLEY_CONTEXT_TOKENS with headroom below the model's real window.
"""

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

CHARS_PER_TOKEN = 4
MESSAGE_OVERHEAD_TOKENS = 4
IMAGE_TOKENS = 800
MISSING_RESULT = "[no result: this tool call did not complete]"
# Message.Kind.COMPACTION (this module imports no model), and how its summary is headed.
COMPACTION = "compaction"
SUMMARY_HEAD = "[summary of the earlier conversation]"

ChatMessage = dict[str, Any]


@dataclass(frozen=True)
class FileInput:
    """A file attached to a message, as read for the model (by the caller: this module
    reads nothing)."""

    filename: str
    content_type: str
    width: int | None = None
    height: int | None = None
    pages: int | None = None  # PDFs
    # Images: a data URL when the model takes images, else empty (described in words).
    image_url: str = ""
    # Text files and PDFs: the text, at most file_text_chars of it (None: unreadable).
    text: str | None = None
    # Whether `text` is all of the file's text.
    complete: bool = True
    # Not read yet (build_model_input reads only the files of the messages it keeps):
    # `key` names it to the reader, `size` bounds what its text can cost.
    read: bool = True
    key: str = ""
    size: int = 0

    @property
    def is_image(self) -> bool:
        return self.content_type.startswith("image/")


class StoredMessage(Protocol):
    @property
    def role(self) -> str: ...
    @property
    def content(self) -> str: ...
    @property
    def tool_calls(self) -> list[dict[str, str]]: ...
    @property
    def tool_call_id(self) -> str: ...


@dataclass(frozen=True)
class HistoryMessage:
    """The fields of a stored message that the model sees."""

    role: str
    content: str = ""
    tool_calls: list[dict[str, str]] = field(default_factory=list)
    tool_call_id: str = ""
    files: tuple[FileInput, ...] = ()


def file_text_chars(token_budget: int) -> int:
    """The most text of one message's files the model is sent: half the token budget."""
    return max(0, token_budget * CHARS_PER_TOKEN // 2)


def _file_text(file: FileInput, limit: int | None) -> str:
    pages = "" if file.pages is None else f", {file.pages} page{'s' * (file.pages != 1)}"
    head = f"[file: {file.filename}{pages}]"
    if file.text is None:
        return f"{head}\n[its text could not be read]"
    text = file.text
    if file.pages is not None and not text.strip():
        return f"{head}\n[it holds no text: scanned pages, perhaps]"
    shown = text if limit is None else text[:limit]
    if len(shown) == len(text) and file.complete:
        return f"{head}\n{text}"
    return f"{head}\n{shown}\n[cut: only the first {len(shown)} characters of {file.filename} fit]"


def _image_text(file: FileInput) -> str:
    size = f", {file.width}x{file.height}" if file.width and file.height else ""
    return f"[image: {file.filename}{size}]"


def message_content(content: str, files: Sequence[FileInput], *, file_chars: int | None) -> Any:
    """A message's content with its files: before the text, which the model reads last.
    Their text is cut to `file_chars` in all (None: never cut). Plain text unless an
    image goes as an image part."""
    readable = sum(1 for f in files if not f.is_image)
    share = None if file_chars is None else file_chars // max(1, readable)
    parts: list[dict[str, Any]] = []
    for file in files:
        if file.is_image and file.image_url:
            parts.append({"type": "image_url", "image_url": {"url": file.image_url}})
        else:
            text = _image_text(file) if file.is_image else _file_text(file, share)
            parts.append({"type": "text", "text": text})
    if content:
        parts.append({"type": "text", "text": content})
    if all(part["type"] == "text" for part in parts):
        return "\n\n".join(part["text"] for part in parts)
    return parts


def chat_message(message: StoredMessage, *, file_chars: int | None = None) -> ChatMessage:
    """A stored message in OpenAI chat format (also the JSONL export's format). Its files
    (HistoryMessage.files) go with it, their text cut to `file_chars` in all (None: whole)."""
    if message.role == "tool":
        return {"role": "tool", "tool_call_id": message.tool_call_id, "content": message.content}
    out: ChatMessage = {"role": message.role}
    files: Sequence[FileInput] = getattr(message, "files", ())
    if files:
        out["content"] = message_content(message.content, files, file_chars=file_chars)
        return out
    if message.content or not message.tool_calls:
        out["content"] = message.content
    if message.tool_calls:
        out["tool_calls"] = [
            {
                "id": call["id"],
                "type": "function",
                "function": {"name": call["name"], "arguments": call["arguments"]},
            }
            for call in message.tool_calls
        ]
    return out


def system_message(content: str) -> ChatMessage:
    return {"role": "system", "content": content}


def current_draft_context(draft: str) -> str:
    return f'[current draft: "{draft}"]'


def estimate_tokens(message: ChatMessage) -> int:
    content = message.get("content") or ""
    images = 0
    if isinstance(content, list):
        images = sum(1 for part in content if part.get("type") == "image_url")
        content = "".join(part.get("text", "") for part in content)
    chars = len(content) + len(message.get("tool_call_id") or "")
    for call in message.get("tool_calls") or []:
        chars += len(call["id"]) + len(call["function"]["name"])
        chars += len(call["function"]["arguments"])
    return MESSAGE_OVERHEAD_TOKENS + math.ceil(chars / CHARS_PER_TOKEN) + images * IMAGE_TOKENS


@dataclass
class _OpenGroup:
    unit: list[ChatMessage]
    pending: list[str]
    # System messages stored while the tools ran; sent right after the results.
    deferred: list[list[ChatMessage]] = field(default_factory=list)

    def close(self) -> list[list[ChatMessage]]:
        for call_id in self.pending:
            self.unit.append({"role": "tool", "tool_call_id": call_id, "content": MISSING_RESULT})
        return [self.unit, *self.deferred]


def history_units(
    history: Sequence[StoredMessage], *, file_chars: int | None = None
) -> list[list[ChatMessage]]:
    """Split history into units that truncation keeps or drops whole.

    A tool-calling assistant message and its results are one unit. A result whose call is
    not in the window (it fell off the read tail) is dropped. A call whose result is
    missing (a run stopped mid-tools) gets a placeholder result so the API accepts it.
    """
    return [unit for unit, _ in _units(history, file_chars=file_chars)]


# A unit, and the message it was made of when that message carries files (such a message
# is a unit of its own: tool groups hold assistant, tool and system messages only).
_Unit = tuple[list[ChatMessage], StoredMessage | None]


def _units(history: Sequence[StoredMessage], *, file_chars: int | None) -> list[_Unit]:
    units: list[_Unit] = []
    group: _OpenGroup | None = None
    for message in history:
        if message.role == "assistant" and not message.content and not message.tool_calls:
            # A reply stopped while the model was still thinking said nothing: its
            # thoughts are never sent back, and an empty turn some servers refuse.
            continue
        if message.role == "tool":
            if group is not None and message.tool_call_id in group.pending:
                group.unit.append(chat_message(message, file_chars=file_chars))
                group.pending.remove(message.tool_call_id)
                if not group.pending:
                    units += [(unit, None) for unit in group.close()]
                    group = None
            continue
        if group is not None:
            if message.role == "system":
                group.deferred.append([chat_message(message, file_chars=file_chars)])
                continue
            units += [(unit, None) for unit in group.close()]
            group = None
        if message.role == "assistant" and message.tool_calls:
            group = _OpenGroup(
                unit=[chat_message(message, file_chars=file_chars)],
                pending=[c["id"] for c in message.tool_calls],
            )
        else:
            carries = message if getattr(message, "files", ()) else None
            units.append(([chat_message(message, file_chars=file_chars)], carries))
    if group is not None:
        units += [(unit, None) for unit in group.close()]
    return units


class HistoryTooLong(Exception):
    """The history does not fit the token budget, and its oldest turns may not be dropped
    (a response asking for `truncation: disabled`)."""

    def __init__(self, token_budget: int) -> None:
        super().__init__(f"the history does not fit {token_budget} tokens")
        self.token_budget = token_budget


def compaction_applied(history: Sequence[StoredMessage]) -> list[StoredMessage]:
    """`history` as the model reads it: the messages before its newest compaction that
    the compaction covers (by their seq; a message with none, a request's own input, is
    never covered) left out, and each compaction as a system message with its summary."""
    kinds = [getattr(message, "kind", "") for message in history]
    if COMPACTION not in kinds:
        return list(history)
    newest = len(kinds) - 1 - kinds[::-1].index(COMPACTION)
    payload = getattr(history[newest], "provider_payload", None) or {}
    covers = payload.get("covers_seq") if isinstance(payload, dict) else None
    covers = covers if isinstance(covers, int) else 0
    out: list[StoredMessage] = []
    for index, message in enumerate(history):
        seq = getattr(message, "seq", None)
        if index < newest and isinstance(seq, int) and 0 < seq <= covers:
            continue
        if kinds[index] == COMPACTION:
            message = HistoryMessage(role="system", content=f"{SUMMARY_HEAD}\n{message.content}")
        out.append(message)
    return out


def _starts_unread(history: Sequence[StoredMessage]) -> bool:
    """Whether messages before the first one of `history` were left unread: its first
    stored message is not its path's first, and no compaction in it covers the gap."""
    seqs = [seq for m in history if isinstance(seq := getattr(m, "seq", None), int)]
    if not seqs or min(seqs) <= 1:
        return False
    covered = 0
    for message in history:
        if getattr(message, "kind", "") == COMPACTION:
            payload = getattr(message, "provider_payload", None) or {}
            reach = payload.get("covers_seq") if isinstance(payload, dict) else None
            covered = reach if isinstance(reach, int) else 0
    return covered < min(seqs) - 1


# Reads files (FileInput.read false) for the model: the read files by key.
FilesRead = Callable[[Sequence[FileInput]], Mapping[str, FileInput]]


def _unread_tokens(files: Sequence[FileInput], file_chars: int) -> int:
    """What the files not read yet can cost at most, beyond their placeholder's text."""
    share = file_chars // max(1, sum(1 for f in files if not f.is_image))
    tokens = 0
    for file in files:
        if not file.read:
            tokens += (
                IMAGE_TOKENS
                if file.is_image
                else math.ceil(min(file.size, share) / CHARS_PER_TOKEN)
            )
    return tokens


def build_model_input(
    *,
    system_prompt: str,
    history: Sequence[StoredMessage],
    draft: str,
    token_budget: int,
    files_read: FilesRead | None = None,
    truncate: bool = True,
) -> list[ChatMessage]:
    """The messages for the next model call.

    Keeps the newest units that fit in `token_budget` minus the preamble and trailing
    context; the newest unit is always kept, so the latest user message is never dropped.
    Without `truncate`, HistoryTooLong instead of dropping any unit, or when the history
    read starts past the path's first message (the read's cap on messages left older
    ones out) and no compaction covers those.
    Files not read yet are counted at the most they can cost, and only those of the
    messages kept are read, with one call of `files_read`.
    """
    if not truncate and _starts_unread(history):
        raise HistoryTooLong(token_budget)
    history = compaction_applied(history)
    head = [system_message(system_prompt)] if system_prompt else []
    tail = [system_message(current_draft_context(draft))] if draft else []
    remaining = token_budget - sum(estimate_tokens(m) for m in head + tail)
    file_chars = file_text_chars(token_budget)
    kept: list[_Unit] = []
    for unit, carries in reversed(_units(history, file_chars=file_chars)):
        cost = sum(estimate_tokens(m) for m in unit)
        if carries is not None:
            cost += _unread_tokens(getattr(carries, "files", ()), file_chars)
        if kept and cost > remaining:
            if not truncate:
                raise HistoryTooLong(token_budget)
            break
        kept.append((unit, carries))
        remaining -= cost
    kept.reverse()
    if files_read is not None:
        kept = _with_files_read(kept, files_read, file_chars=file_chars)
    body = [message for unit, _ in kept for message in unit]
    return head + body + tail


def _with_files_read(kept: list[_Unit], files_read: FilesRead, *, file_chars: int) -> list[_Unit]:
    unread = [
        file
        for _, carries in kept
        if carries is not None
        for file in getattr(carries, "files", ())
        if not file.read
    ]
    if not unread:
        return kept
    found = files_read(unread)
    out: list[_Unit] = []
    for unit, carries in kept:
        if carries is not None:
            files = tuple(
                f if f.read else found.get(f.key, f) for f in getattr(carries, "files", ())
            )
            message = HistoryMessage(role=carries.role, content=carries.content, files=files)
            unit = [chat_message(message, file_chars=file_chars)]
        out.append((unit, carries))
    return out
