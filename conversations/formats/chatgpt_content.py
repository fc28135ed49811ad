"""What one message of a ChatGPT export says, as Parley text (formats/chatgpt.py walks the
tree around it).

ChatGPT keeps a message's body in `content`, whose shape depends on `content_type`: text
parts, images and audio as asset pointers, code and its output, browsing results, a
reasoning model's thoughts, the user's custom instructions. Text is kept as it is; what
cannot come along (images, audio, uploaded files) becomes a visible placeholder such as
`[image not imported: file-abc (1024x768)]` (with a multiplication sign), and the raw
part is kept in the message's provider_payload, so nothing disappears without a trace.
"""

import math
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from conversations.validation import type_name

# Content types whose text is a reasoning model's thinking, attached to the next reply.
REASONING_TYPES = ("thoughts", "reasoning_recap")
INSTRUCTIONS_TYPE = "user_editable_context"
# Placeholders stand on their own paragraph, so Markdown never runs them into the text.
JOIN = "\n\n"
# Largest reasoning time kept, in milliseconds (Message.reasoning_ms is a 32-bit column).
REASONING_MS_MAX = 2**31 - 1


@dataclass(frozen=True)
class Body:
    """A message's text, the non-text parts it stands in for, and whether the content type
    was understood (if not, the caller keeps the raw content)."""

    text: str
    assets: list[Any] = field(default_factory=list)
    understood: bool = True


def epoch_time(value: Any) -> datetime | None:
    """A ChatGPT timestamp (seconds since the epoch, a float) as an aware datetime, or None
    when it is missing or not a usable number."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if not math.isfinite(value) or value < 0:
        return None
    try:
        return datetime.fromtimestamp(value, tz=UTC)
    except (OverflowError, OSError, ValueError):
        return None


def content_type(message: dict[str, Any]) -> str:
    content = message.get("content")
    kind = content.get("content_type") if isinstance(content, dict) else None
    return kind if isinstance(kind, str) else ""


def _string(value: Any) -> str:
    return value if isinstance(value, str) else ""


def asset_id(pointer: Any) -> str:
    """`file-service://file-abc` and `sediment://file_00ab` name the files `file-abc` and
    `file_00ab`; the export's file names start with those ids."""
    text = _string(pointer)
    return text.split("://", 1)[-1] or "unknown"


def _size(part: dict[str, Any]) -> str:
    width, height = part.get("width"), part.get("height")
    if isinstance(width, int) and isinstance(height, int) and not isinstance(width, bool):
        return f" ({width}\u00d7{height})"
    return ""


def part_placeholder(part: Any) -> str:
    """The visible stand-in for a content part that is not text."""
    if not isinstance(part, dict):
        return f"[content part not imported: {type_name(part)}]"
    kind = _string(part.get("content_type")) or "attachment"
    pointer = asset_id(part.get("asset_pointer")) if part.get("asset_pointer") else ""
    if kind == "image_asset_pointer":
        return f"[image not imported: {pointer or 'unknown'}{_size(part)}]"
    if kind == "audio_asset_pointer":
        return f"[audio not imported: {pointer or 'unknown'}]"
    if kind == "real_time_user_audio_video_asset_pointer":
        inner = part.get("audio_asset_pointer")
        inner_id = asset_id(inner.get("asset_pointer")) if isinstance(inner, dict) else ""
        return f"[audio/video not imported: {inner_id or pointer or 'unknown'}]"
    return f"[{kind} not imported{': ' + pointer if pointer else ''}]"


def _parts(parts: list[Any]) -> Body:
    pieces: list[str] = []
    assets: list[Any] = []
    for part in parts:
        if isinstance(part, str):
            if part:
                pieces.append(part)
        elif isinstance(part, dict) and part.get("content_type") == "audio_transcription":
            # What was said aloud is the message itself: keep its words.
            if _string(part.get("text")):
                pieces.append(_string(part.get("text")))
        else:
            pieces.append(part_placeholder(part))
            assets.append(part)
    return Body(JOIN.join(pieces), assets)


def message_body(message: dict[str, Any]) -> Body:
    """The text of a message (not its reasoning or custom instructions: see below)."""
    content = message.get("content")
    if not isinstance(content, dict):
        return Body("[message content not imported: unreadable]", understood=False)
    kind = content_type(message)
    parts = content.get("parts")
    if kind in ("text", "multimodal_text") and isinstance(parts, list):
        return _parts(parts)
    if kind in ("code", "execution_output", "computer_output"):
        text = content.get("text")
        if isinstance(text, str):
            return Body(text)
    if kind == "tether_browsing_display":
        return Body(_string(content.get("result")) or _string(content.get("summary")))
    if kind == "tether_quote":
        title, url = _string(content.get("title")), _string(content.get("url"))
        source = f"[{title or url}]({url})" if url else title
        return Body(JOIN.join(p for p in (source, _string(content.get("text"))) if p))
    if kind == "system_error":
        name = _string(content.get("name")) or "error"
        return Body(f"[{name}] {_string(content.get('text'))}".rstrip())
    # A type this importer does not know: its text if it has some, else a placeholder
    # (the caller keeps the raw content beside it either way).
    known = _parts(parts) if isinstance(parts, list) else Body(_string(content.get("text")))
    placeholder = f"[{kind or 'content'} not imported]"
    text = known.text if known.text else placeholder
    return Body(text, known.assets, understood=False)


def code_language(message: dict[str, Any]) -> str:
    content = message.get("content")
    language = content.get("language") if isinstance(content, dict) else None
    return language if isinstance(language, str) and language != "unknown" else ""


def fenced(text: str, language: str) -> str:
    """Code shown to the user, as a Markdown block no backtick run inside can close."""
    longest = run = 0
    for char in text:
        run = run + 1 if char == "`" else 0
        longest = max(longest, run)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{language}\n{text}\n{fence}"


def reasoning_text(message: dict[str, Any]) -> str:
    """The thinking of a `thoughts` message (each thought's summary, then its text) or the
    line of a `reasoning_recap` ("Thought for 12 seconds")."""
    content = message.get("content")
    if not isinstance(content, dict):
        return ""
    if content_type(message) == "reasoning_recap":
        return _string(content.get("content"))
    thoughts = content.get("thoughts")
    if isinstance(thoughts, str):
        return thoughts
    pieces: list[str] = []
    for thought in thoughts if isinstance(thoughts, list) else []:
        if isinstance(thought, str):
            pieces.append(thought)
        elif isinstance(thought, dict):
            summary, text = _string(thought.get("summary")), _string(thought.get("content"))
            pieces += [p for p in (f"**{summary}**" if summary else "", text) if p]
    return JOIN.join(pieces)


def reasoning_ms(message: dict[str, Any]) -> int | None:
    """How long the model thought, when the export says (`finished_duration_sec`)."""
    metadata = message.get("metadata")
    seconds = metadata.get("finished_duration_sec") if isinstance(metadata, dict) else None
    if isinstance(seconds, bool) or not isinstance(seconds, int | float):
        return None
    if not math.isfinite(seconds) or seconds < 0:
        return None
    return min(round(seconds * 1000), REASONING_MS_MAX)


def instructions_text(message: dict[str, Any]) -> str:
    """Custom instructions: what the user said about themselves, then how to answer."""
    content = message.get("content")
    if not isinstance(content, dict):
        return ""
    fields = (_string(content.get("user_profile")), _string(content.get("user_instructions")))
    return JOIN.join(text.strip() for text in fields if text.strip())


def attachment_placeholders(message: dict[str, Any], shown: list[Any]) -> tuple[str, list[Any]]:
    """Files the user attached (`metadata.attachments`) that no content part already stands
    for: their placeholders, and the attachment records themselves."""
    metadata = message.get("metadata")
    attachments = metadata.get("attachments") if isinstance(metadata, dict) else None
    if not isinstance(attachments, list):
        return "", []
    seen = {asset_id(p.get("asset_pointer")) for p in shown if isinstance(p, dict)}
    pieces: list[str] = []
    kept: list[Any] = []
    for item in attachments:
        if not isinstance(item, dict):
            continue
        file_id = _string(item.get("id"))
        if file_id and file_id in seen:
            continue
        name = _string(item.get("name")) or file_id or "unnamed"
        kind = "image" if _string(item.get("mime_type")).startswith("image/") else "file"
        size = _size(item) if kind == "image" else ""
        where = f" ({file_id})" if file_id and file_id != name else ""
        pieces.append(f"[{kind} not imported: {name}{where}{size}]")
        kept.append(item)
    return JOIN.join(pieces), kept
