"""Exports of many conversations at once, as byte streams with flat memory.

The selection is walked in primary-key pages. Where a format needs the messages of many
conversations (JSONL: the active branch's path; CSV: every message of every branch), the
messages of a page of conversations come from one query read through a server-side
cursor (`.iterator()`), so the cost is one query per few thousand messages rather than
one per conversation (plus one for the active branches of those that have several). ZIP
archives are written by formats/zip_streams.py.

Formats: a ZIP of JSON documents (version 2: every branch; each re-imports to the same
tree), a ZIP of Markdown transcripts (the active path), one JSONL file (OpenAI chat
fine-tuning format, the active path) and one CSV of every message with its branch.
"""

import csv
import itertools
import json
import unicodedata
import zipfile
from collections.abc import Iterable, Iterator
from typing import Any
from uuid import UUID

from django.db.models import Q, QuerySet, TextField
from django.db.models.functions import Cast

from conversations.context import HistoryMessage
from conversations.formats.exporting import export_json_chunks, export_markdown_chunks, jsonl_line
from conversations.formats.zip_streams import FLUSH_BYTES, ZipSink
from conversations.models import Branch, Conversation, Message
from conversations.selectors.branches import SEGMENTS_PER_QUERY, path_ranges, ranges_filter

# Conversations read per page, and the message budget of one message query.
CONVERSATION_PAGE = 500
MESSAGES_PER_QUERY = 20_000
# Conversations of several branches read in one message query: each adds its active
# path's segments to the query's condition, so they are capped to keep it small.
PATHS_PER_QUERY = 50
READ_CHUNK = 5_000

CSV_COLUMNS = [
    "conversation_id",
    "conversation_title",
    "owner_id",
    "branch_id",
    "seq",
    "role",
    "kind",
    "name",
    "tool_call_id",
    "content",
    "tool_calls",
    "created_at",
    "run_id",
    "total_tokens",
]


def conversations_in_pages(
    queryset: QuerySet[Conversation], size: int = CONVERSATION_PAGE
) -> Iterator[list[Conversation]]:
    """The selection, ordered by id, a page at a time (keyset: deep pages cost the same)."""
    rows = queryset.order_by("pk")
    last: UUID | None = None
    while True:
        page = list((rows if last is None else rows.filter(pk__gt=last))[:size])
        if not page:
            return
        yield page
        last = page[-1].pk


def _groups(conversations: list[Conversation]) -> Iterator[list[Conversation]]:
    """Split a page so that one message query reads about MESSAGES_PER_QUERY rows (the
    message count of all branches: at least the active path) and names at most
    PATHS_PER_QUERY paths."""
    group: list[Conversation] = []
    budget = paths = 0
    for conversation in conversations:
        group.append(conversation)
        budget += conversation.message_count
        paths += conversation.branch_count > 1
        if budget >= MESSAGES_PER_QUERY or paths >= PATHS_PER_QUERY:
            yield group
            group, budget, paths = [], 0, 0
    if group:
        yield group


def _active_path_runs(
    group: list[Conversation],
) -> Iterator[tuple[list[Conversation], list[Q | None]]]:
    """The group's conversations in runs, each with the conditions that select their
    active paths, read one query after the other. A conversation of one branch is all its
    messages (by conversation id, as before branches); for the others the active branch
    is read (one query for the group) and its path's segments are named, so seq is unique
    per conversation among the rows and orders each path. A query names at most
    SEGMENTS_PER_QUERY segments: a path crossing more forks is a run of its own, read a
    query per SEGMENTS_PER_QUERY of its segments."""
    branched = [c.active_branch_id for c in group if c.branch_count > 1]
    branches = {b.pk: b for b in Branch.objects.filter(pk__in=branched)} if branched else {}
    run: list[Conversation] = []
    singles: list[UUID] = []
    ranges: list[tuple[UUID, int, int]] = []

    def condition() -> Q | None:
        parts = [Q(conversation__in=singles)] if singles else []
        if ranges:
            parts.append(ranges_filter(ranges))
        return Q(*parts, _connector=Q.OR) if parts else None

    for conversation in group:
        if conversation.branch_count <= 1:
            run.append(conversation)
            singles.append(conversation.pk)
            continue
        key = conversation.active_branch_id
        branch = branches.get(key) if key is not None else None
        mine = path_ranges(branch, after=0, last=branch.message_count) if branch else []
        if run and len(ranges) + len(mine) > SEGMENTS_PER_QUERY:
            yield run, [condition()]
            run, singles, ranges = [], [], []
        if len(mine) > SEGMENTS_PER_QUERY:
            chunks = range(0, len(mine), SEGMENTS_PER_QUERY)
            yield [conversation], [ranges_filter(mine[i : i + SEGMENTS_PER_QUERY]) for i in chunks]
            continue
        run.append(conversation)
        ranges += mine
    if run:
        yield run, [condition()]


def _rows(
    condition: Q | None,
    ordering: tuple[str, ...],
    fields: tuple[str, ...],
    expressions: dict[str, Any],
) -> Iterator[tuple[Any, ...]]:
    messages = (
        Message.objects.filter(condition) if condition is not None else Message.objects.none()
    )
    return (
        messages.annotate(**expressions)
        .order_by(*ordering)
        .values_list("conversation_id", *fields)
        .iterator(chunk_size=READ_CHUNK)
    )


def _with_messages(
    queryset: QuerySet[Conversation],
    fields: tuple[str, ...],
    *,
    active_path: bool,
    **expressions: Any,
) -> Iterator[tuple[Conversation, list[tuple[Any, ...]]]]:
    """Each conversation of the selection with its messages' `fields` (names or
    annotations given in `expressions`): its active path in seq order, or (without
    `active_path`) every message of every branch, a branch at a time (oldest first, so
    the root comes first) and each in seq order."""
    for page in conversations_in_pages(queryset):
        for group in _groups(page):
            if active_path:
                runs = list(_active_path_runs(group))
                ordering: tuple[str, ...] = ("conversation_id", "seq")
            else:
                runs = [(group, [Q(conversation__in=[c.pk for c in group])])]
                ordering = ("conversation_id", "branch__created_at", "branch_id", "seq")
            for run, conditions in runs:
                rows = itertools.chain.from_iterable(
                    _rows(condition, ordering, fields, expressions) for condition in conditions
                )
                by_conversation: dict[UUID, list[tuple[Any, ...]]] = {}
                for key, found in itertools.groupby(rows, key=lambda r: r[0]):
                    by_conversation.setdefault(key, []).extend(found)
                for conversation in run:
                    yield conversation, by_conversation.pop(conversation.pk, [])


def _sized(pieces: Iterable[str]) -> Iterator[bytes]:
    """Join small text pieces into pieces of about FLUSH_BYTES, encoded as UTF-8."""
    buffer: list[str] = []
    size = 0
    for piece in pieces:
        buffer.append(piece)
        size += len(piece)
        if size >= FLUSH_BYTES:
            yield "".join(buffer).encode()
            buffer, size = [], 0
    if buffer:
        yield "".join(buffer).encode()


# --- JSONL ---------------------------------------------------------------------------


def _calls(text: str) -> list[dict[str, str]]:
    calls: list[dict[str, str]] = [] if text == "[]" else json.loads(text)
    return calls


def jsonl_stream(queryset: QuerySet[Conversation]) -> Iterator[bytes]:
    """One line per conversation in OpenAI's chat fine-tuning format."""
    # Tool calls are read as JSON text and decoded here only when there are any: most
    # messages have none, and decoding "[]" per row was a third of the export's time.
    fields = ("role", "content", "calls_text", "tool_call_id")
    calls_text = Cast("tool_calls", TextField())
    return _sized(
        jsonl_line(
            conversation.system_prompt,
            [
                HistoryMessage(
                    role=role, content=content, tool_calls=_calls(calls), tool_call_id=call_id
                )
                for _, role, content, calls, call_id in rows
            ],
        )
        for conversation, rows in _with_messages(
            queryset, fields, active_path=True, calls_text=calls_text
        )
    )


# --- CSV -----------------------------------------------------------------------------


class _Line:
    """A file-like target for csv.writer that keeps what was written last."""

    value = ""

    def write(self, text: str) -> int:
        self.value = text
        return len(text)


# A cell starting with one of these is a formula to a spreadsheet: content written by a
# user or a model could run one in the moderator's spreadsheet (CSV injection). The
# full-width forms count too, and so does one behind spaces or line breaks, which some
# spreadsheets skip.
_FORMULA_STARTS = (
    "=",
    "+",
    "-",
    "@",
    "\t",
    "\r",
    "\n",
    "|",
    "%",
    "\uff1d",
    "\uff0b",
    "\uff0d",
    "\uff20",
    # The small forms of the same signs.
    "\ufe62",
    "\ufe63",
    "\ufe66",
    "\ufe6b",
)


def _visible_start(text: str) -> str:
    """The text from its first character a spreadsheet would not skip: whitespace and
    invisible format characters (a byte-order mark, zero-width spaces) may hide a sign."""
    for index, char in enumerate(text):
        if not (char.isspace() or unicodedata.category(char) == "Cf"):
            return text[index:]
    return ""


def csv_cell(value: object) -> str:
    """Any cell made inert for spreadsheets: a leading apostrophe, which spreadsheets
    show as plain text (OWASP's advice for CSV injection). Every cell of the export goes
    through here, not only the ones that hold text today."""
    text = "" if value is None else str(value)
    risky = text.startswith(_FORMULA_STARTS) or _visible_start(text).startswith(_FORMULA_STARTS)
    return f"'{text}" if risky else text


def csv_stream(queryset: QuerySet[Conversation]) -> Iterator[bytes]:
    """Every message of the selection, one row each. The csv module quotes fields holding
    commas, quotes or line breaks, so multi-line content survives a spreadsheet; text
    that would start a formula is neutralised, in every column (csv_cell)."""
    fields = (
        "branch_id",
        "seq",
        "role",
        "kind",
        "name",
        "tool_call_id",
        "content",
        "tool_calls",
        "created_at",
        "run_id",
        "usage",
    )
    line = _Line()
    writer = csv.writer(line)

    def row(cells: list[Any]) -> str:
        # The one way a line is written: every cell passes the formula guard.
        writer.writerow([csv_cell(cell) for cell in cells])
        return line.value

    def rows() -> Iterator[str]:
        yield row(CSV_COLUMNS)
        for conversation, messages in _with_messages(queryset, fields, active_path=False):
            for message in messages:
                _, branch_id, seq, role, kind, name, call_id, content, calls, at, run_id, usage = (
                    message
                )
                cells = [
                    conversation.pk,
                    conversation.title,
                    conversation.owner_id,
                    branch_id,
                    seq,
                    role,
                    kind,
                    name,
                    call_id,
                    content,
                    json.dumps(calls, ensure_ascii=False) if calls else "",
                    at.isoformat(),
                    run_id,
                    (usage or {}).get("total_tokens", "") if isinstance(usage, dict) else "",
                ]
                yield row(cells)

    return _sized(rows())


# --- ZIP archives --------------------------------------------------------------------


def _zip_stream(queryset: QuerySet[Conversation], extension: str, document: Any) -> Iterator[bytes]:
    sink = ZipSink()
    with zipfile.ZipFile(sink, mode="w", compression=zipfile.ZIP_DEFLATED) as archive:
        for page in conversations_in_pages(queryset):
            for conversation in page:
                name = f"{conversation.pk}.{extension}"
                with archive.open(name, mode="w", force_zip64=True) as member:
                    for piece in document(conversation):
                        member.write(piece.encode())
                        if sink.size >= FLUSH_BYTES:
                            yield sink.take()
                yield sink.take()
    yield sink.take()


def json_zip_stream(queryset: QuerySet[Conversation]) -> Iterator[bytes]:
    """A ZIP with one JSON document per conversation, `<id>.json`, in the current version
    (every branch, each message's branch, the active branch, tags, pin and folder): each
    re-imports to the same tree. Folders and tags are read with each page of
    conversations, not one query each."""
    organised = queryset.select_related("folder").prefetch_related("tags")
    return _zip_stream(organised, "json", export_json_chunks)


def markdown_zip_stream(queryset: QuerySet[Conversation]) -> Iterator[bytes]:
    return _zip_stream(queryset, "md", export_markdown_chunks)
