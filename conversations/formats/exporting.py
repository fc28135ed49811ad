"""Export formats (import is formats/importing.py).

- JSON (`parley.conversation`, version 2): the lossless format; import reads it back
  exactly. Version 2 added each message's reasoning, the generation settings and the
  branches: every branch with its fork point, each message's branch, the active branch.
  Version 1 (asked for explicitly) is the active branch's path as one line.
  Version 2 lists each message's files (`attachments`: id, filename, type, size,
  sha256), and how the conversation is organised (`tags` and `folder` by name,
  `pinned`); version 1 leaves them out.
- Markdown: for people: the active path, with the other versions at each fork point
  listed briefly where they branch off, and each message's files as links to their
  bytes (`/api/v1/files/<id>/content`, relative to the site).
- JSONL: one conversation per line in OpenAI's chat fine-tuning format (the active path).

Exports stream: messages are read in seq order in chunks and written as they come, so
memory stays flat however long the conversation is. Files cost a query per chunk of
messages, and none for a conversation that carries none. The ZIP export (the JSON and
the files' bytes) is formats/bundles.py.
"""

import itertools
import json
import logging
import re
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, TypeVar
from uuid import UUID

from django.db.models import Q
from django.utils import timezone

from config.log_context import exception_for_log
from conversations import validation
from conversations.context import StoredMessage, history_units
from conversations.models import Branch, Conversation, Message, StoredFile
from conversations.selectors.attachments import attachment_files, conversation_has_attachments
from conversations.selectors.branches import (
    BRANCH_FIELDS,
    SEGMENTS_PER_QUERY,
    alternatives_at,
    branch_active,
    path_querysets,
)
from conversations.serializers import (
    attachment_export_dict,
    branch_export_dict,
    conversation_export_dict,
    conversation_organising_export_dict,
    message_export_dict,
)

log = logging.getLogger(__name__)

FORMAT = "parley.conversation"
VERSION = 2
# What version 2 added, left out of a version 1 document.
V2_CONVERSATION_FIELDS = ("temperature", "max_output_tokens", "vision", "active_branch_id")
V2_MESSAGE_FIELDS = ("reasoning", "reasoning_ms", "branch_id")
READ_CHUNK = 2000
# Branches whose messages one query of the JSON export reads together, at most.
BRANCHES_PER_QUERY = 1000
# Alternatives whose opening words one query of the Markdown export reads, at most.
PREVIEWS_PER_QUERY = 1000


# --- a download that fails part way -----------------------------------------------

# Ends a Markdown download that failed part way: what came before it stands.
MARKDOWN_CUT = (
    "\n\n---\n\n**The export stopped here: an error kept the rest from being written.**\n"
)


Chunk = TypeVar("Chunk", str, bytes)


def chunks_ended_cleanly(
    chunks: Iterator[Chunk], *, notice: Chunk | None = None
) -> Iterator[Chunk]:
    """`chunks` until one fails, then `notice`: the error is logged and the download ends
    (a JSON document cut short is invalid, which says it is incomplete), where an error
    raised into the server would leave some clients waiting on an open connection."""
    try:
        yield from chunks
    except Exception as exc:
        log.error("an export failed part way", exc_info=exception_for_log(exc))
        if notice:
            yield notice


# --- JSON export ------------------------------------------------------------------


def _messages(conversation: Conversation) -> Iterator[Message]:
    """The active branch's path, in order."""
    branch = branch_active(conversation=conversation)
    for messages in path_querysets(branch, after=0, last=branch.message_count):
        yield from messages.iterator(chunk_size=READ_CHUNK)


def _depths(rows: list[dict[str, Any]]) -> dict[UUID, int]:
    """Each branch's depth in the tree (the root's is 0), from the parent links alone."""
    parents = {row["id"]: row["parent_id"] for row in rows}
    depths: dict[UUID, int] = {}
    for key in parents:
        chain = []
        while key is not None and key not in depths:
            chain.append(key)
            key = parents.get(key)
        depth = depths[key] if key is not None else -1
        for item in reversed(chain):
            depth += 1
            depths[item] = depth
    return depths


def _branches(conversation: Conversation) -> list[dict[str, Any]]:
    """Every branch, each parent before its children: by depth, then age."""
    rows = list(Branch.objects.filter(conversation=conversation).values(*BRANCH_FIELDS))
    depths = _depths(rows)
    return sorted(rows, key=lambda r: (depths[r["id"]], r["created_at"], str(r["id"])))


def _group_messages(group: list[dict[str, Any]]) -> Iterator[Message]:
    if not group:
        return
    found: dict[UUID, list[Message]] = {}
    for message in Message.objects.filter(branch_id__in=[row["id"] for row in group]).order_by(
        "seq"
    ):
        found.setdefault(message.branch_id, []).append(message)
    for row in group:
        yield from found.get(row["id"], [])


def _branch_messages(branches: list[dict[str, Any]]) -> Iterator[Message]:
    """Each branch's own messages, branch by branch in the order given, each in seq order.
    Branches holding few messages are read together (a query per READ_CHUNK messages or
    BRANCHES_PER_QUERY branches), a long one on its own through a cursor: thousands of
    short branches cost a few queries, not one each, and memory stays flat."""
    group: list[dict[str, Any]] = []
    held = 0
    for row in branches:
        own = row["message_count"] - row["fork_seq"]
        if own >= READ_CHUNK:
            yield from _group_messages(group)
            group, held = [], 0
            messages = Message.objects.filter(branch_id=row["id"]).order_by("seq")
            yield from messages.iterator(chunk_size=READ_CHUNK)
            continue
        if group and (held + own > READ_CHUNK or len(group) >= BRANCHES_PER_QUERY):
            yield from _group_messages(group)
            group, held = [], 0
        group.append(row)
        held += own
    yield from _group_messages(group)


def _with_files(
    messages: Iterable[Message], *, conversation_id: UUID, has_files: bool
) -> Iterator[tuple[Message, list[StoredFile]]]:
    """Each message with its files, in order: a query per READ_CHUNK messages, none when
    the conversation carries no file (`has_files`)."""
    if not has_files:
        for message in messages:
            yield message, []
        return
    for chunk in _batched(messages, READ_CHUNK):
        files = attachment_files(message_ids=[message.pk for message in chunk])
        for message in chunk:
            yield message, files.get(message.pk, [])


def _dumps(value: Any) -> str:
    # Repaired, so a row stored before text was checked still exports (and imports back).
    return json.dumps(validation.storable_json(value), ensure_ascii=False)


def export_json_chunks(conversation: Conversation, *, version: int = VERSION) -> Iterator[str]:
    """The JSON document, as text chunks (one per message) for a streamed download:
    every branch in version 2, the active path alone in version 1. The conversation's
    tags and folder are read with it when prefetched (the bulk exports do, a page of
    conversations at a time), else a query each."""
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
        has_files = False
    else:
        head["conversation"].update(conversation_organising_export_dict(conversation))
        branches = _branches(conversation)
        head["branches"] = [branch_export_dict(row) for row in branches]
        messages = _branch_messages(branches)
        has_files = conversation_has_attachments(conversation_id=conversation.pk)
    yield _dumps(head)[:-1] + ', "messages": ['
    separator = ""
    rows = _with_files(messages, conversation_id=conversation.pk, has_files=has_files)
    for message, files in rows:
        row = message_export_dict(message)
        if version == 1:
            for name in V2_MESSAGE_FIELDS:
                row.pop(name)
        else:
            row["attachments"] = [attachment_export_dict(file) for file in files]
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


# Characters that would end a link's text or format it.
_MARKDOWN_SPECIAL = re.compile(r"([\\`*_{}\[\]()<>#+!|~])")


def _markdown_text(text: str) -> str:
    """Text shown as itself inside Markdown (a link's text)."""
    return _MARKDOWN_SPECIAL.sub(r"\\\1", text)


def _markdown_files(files: list[StoredFile]) -> str:
    """A message's files as links to their bytes (relative to the site: the download
    needs the owner's session or key)."""
    lines = [
        f"- [{_markdown_text(file.filename)}](/api/v1/files/{file.pk}/content)"
        f" ({file.content_type}, {file.size} bytes)"
        for file in files
    ]
    return "**Attachments**\n\n" + "\n".join(lines)


def _markdown_message(message: Message) -> str:
    when = message.created_at.strftime("%Y-%m-%d %H:%M UTC")
    if message.kind == Message.Kind.EVENT:
        return f"> **Context event** · {when}\n>\n> " + message.content.replace("\n", "\n> ")
    if message.kind == Message.Kind.DRAFT_EDIT:
        return f"> **Draft edited by the user** · {when}\n\n" + _block(message.content)
    if message.kind == Message.Kind.COMPACTION:
        return f"> **Earlier turns summarised for the model** · {when}\n\n" + _block(
            message.content
        )
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
    has_files = conversation_has_attachments(conversation_id=conversation.pk)
    for chunk in _batched(_messages(conversation), READ_CHUNK):
        # With the count, a conversation of one branch costs no alternatives query (the
        # admin's Markdown ZIP exports many conversations, most of one branch).
        choices = alternatives_at(
            branch, [m.seq for m in chunk], branch_count=conversation.branch_count
        )
        others = _other_versions(choices)
        files = attachment_files(message_ids=[m.pk for m in chunk]) if has_files else {}
        for message in chunk:
            yield _markdown_message(message) + "\n\n"
            if message.pk in files:
                yield _markdown_files(files[message.pk]) + "\n\n"
            alternatives = choices.get(message.seq)
            if alternatives:
                yield _alternatives_note(message.seq, alternatives, others) + "\n\n"
            yield "---\n\n"


PREVIEW_CHARS = 80


def _batched(items: Iterable[Message], size: int) -> Iterator[list[Message]]:
    iterator = iter(items)
    while batch := list(itertools.islice(iterator, size)):
        yield batch


def _preview_batches(
    choices: dict[int, dict[str, Any] | None],
) -> Iterator[dict[int, list[str]]]:
    """The alternatives at these seqs, as {seq: branch ids} batches of at most
    PREVIEWS_PER_QUERY messages and SEGMENTS_PER_QUERY seqs."""
    batch: dict[int, list[str]] = {}
    held = 0
    for seq, alternatives in choices.items():
        for key in alternatives["branch_ids"] if alternatives else []:
            if held >= PREVIEWS_PER_QUERY or (
                seq not in batch and len(batch) >= SEGMENTS_PER_QUERY
            ):
                yield batch
                batch, held = {}, 0
            batch.setdefault(seq, []).append(key)
            held += 1
    if batch:
        yield batch


def _other_versions(choices: dict[int, dict[str, Any] | None]) -> dict[tuple[str, int], str]:
    """The opening words of every alternative at these seqs: a query per
    PREVIEWS_PER_QUERY of them."""
    previews: dict[tuple[str, int], str] = {}
    for batch in _preview_batches(choices):
        wanted = Q(
            *(Q(seq=seq, branch_id__in=keys) for seq, keys in batch.items()), _connector=Q.OR
        )
        rows = Message.objects.filter(wanted).values_list("branch_id", "seq", "content")
        previews.update(
            ((str(branch), seq), " ".join(content.split())[:PREVIEW_CHARS])
            for branch, seq, content in rows
        )
    return previews


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
