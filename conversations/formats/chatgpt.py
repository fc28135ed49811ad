"""ChatGPT's data export (`conversations.json`) as Parley export documents (version 2, with
branches). Pure: nothing here reads or writes the database; services/chatgpt_import.py
stores each document through the ordinary import, which checks it like any export.

How a conversation comes across:

- **Branches.** ChatGPT keeps a tree of nodes. Walking it from the root, the first child
  of a node continues its parent's branch and each further child starts a new branch
  forked there (parent: the branch holding that node; fork_seq: that node's seq), so a
  tree with k leaves becomes k branches, listed root first and every parent before its
  children. The branch holding `current_node` is active; without a usable current node,
  the branch whose last message is the newest.
- **Skipped nodes.** Nodes without a message, hidden system messages
  (`metadata.is_visually_hidden_from_conversation`) and empty system messages are left
  out; their children hang from the nearest message kept, so seq stays gapless.
- **Custom instructions** (`user_editable_context`) become the conversation's system
  prompt (Parley's preamble), never a message.
- **Attachments.** Text is kept as written. Images, audio, uploaded files and any part
  that is not text become a placeholder such as `[image not imported: file-abc
  (1024x768)]` (with a multiplication sign), the raw part kept in the message's
  provider_payload.
- **Reasoning.** `thoughts` (and a `reasoning_recap` when there are no thoughts) become
  the `reasoning` of the next assistant message on the same path, a reply or a tool
  call, as Parley stores what a model thought before each answer. Thoughts with no
  assistant message after them (a reply stopped while the model was thinking) become an
  assistant message with empty content and those thoughts as reasoning, which is what
  Parley itself stores in that case. Thoughts followed by many replies are copied into
  each, so a conversation that would convert to more text than PARLEY_IMPORT_MAX_BYTES
  is refused as it converts.
- **Tools.** An assistant message addressed to a tool (`recipient` other than "all")
  becomes an assistant tool call (`arguments` `{"code": ...}` for code, else
  `{"input": ...}`); a `tool` message right after its call becomes the call's result.
  Tool output that follows no call is kept as a context event (`[python output]` and
  the text), since a tool result must answer a call. Other visible system messages are
  context events too.
- **Settings.** The model stays empty (the server's default, so the conversation can be
  continued here); ChatGPT's model slug and conversation id go into the metadata, with
  `"source": "chatgpt"`. Tools are the server's defaults, as for a new conversation:
  ChatGPT's own tools (python, browser, dalle) do not exist here. A title over the limit
  is shortened, the full title kept in the metadata; text that does not fit a limit is
  reported, never cut.
"""

import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import uuid4

from django.conf import settings
from django.utils import timezone

from conversations import validation
from conversations.errors import INVALID_IMPORT, INVALID_JSON, Problem, ValidationFailed
from conversations.formats import chatgpt_content as body
from conversations.formats.chatgpt_tree import capped, node_path, tree_read
from conversations.formats.chatgpt_walk import (
    SOURCE,
    Builder,
    Entry,
    active_branch,
    branch_path,
    walk,
)
from conversations.formats.exporting import FORMAT, VERSION
from conversations.json_input import JsonInputError, json_parse, json_problems
from conversations.models import default_tools


@dataclass(frozen=True)
class Converted:
    """One conversation as a Parley document, and the ChatGPT node each of its messages
    came from (in the document's order), so later problems can point into the export."""

    document: dict[str, Any]
    sources: list[str]


def _iso(value: datetime) -> str:
    return value.isoformat()


def _message_out(entry: Entry, branch_id: str) -> dict[str, Any]:
    fields = entry.fields
    return {
        "id": str(uuid4()),
        "branch_id": branch_id,
        "seq": entry.seq,
        "role": fields["role"],
        "kind": fields["kind"],
        "content": fields["content"],
        "reasoning": fields["reasoning"],
        "reasoning_ms": fields["reasoning_ms"],
        "tool_calls": fields["tool_calls"],
        "tool_call_id": fields["tool_call_id"],
        "name": fields["name"],
        "created_at": _iso(entry.created),
        "run_id": None,
        "usage": None,
        "provider_payload": fields["provider_payload"],
    }


def _title(builder: Builder, raw: Any, active: int) -> tuple[str, str]:
    """The title, shortened to the limit when it must be, and the full one if it was."""
    title = raw.strip() if isinstance(raw, str) else ""
    if not title:
        first = next((e for e in branch_path(builder, active) if e.fields["role"] == "user"), None)
        return validation.title_from_message(first.fields["content"] if first else ""), ""
    if len(title) <= validation.TITLE_MAX:
        return title, ""
    return title[: validation.TITLE_MAX - 1].rstrip() + "…", title


def _metadata(conversation: dict[str, Any], full_title: str) -> dict[str, str]:
    metadata = {"source": SOURCE}
    for key, value in (
        ("chatgpt_id", conversation.get("conversation_id") or conversation.get("id")),
        ("chatgpt_model", conversation.get("default_model_slug")),
        ("chatgpt_gizmo_id", conversation.get("gizmo_id")),
        ("chatgpt_title", full_title),
    ):
        limit = validation.METADATA_VALUE_MAX
        if (
            isinstance(value, str)
            and value
            and not validation.text_problems(value, path="", max_chars=limit)
        ):
            metadata[key] = value
    return metadata


def _document(builder: Builder, conversation: dict[str, Any]) -> Converted:
    active = active_branch(builder, conversation.get("current_node"))
    title, full_title = _title(builder, conversation.get("title"), active)
    times = [e.created for branch in builder.messages for e in branch]
    created = body.epoch_time(conversation.get("create_time")) or min(times, default=builder.start)
    updated = body.epoch_time(conversation.get("update_time")) or max([created, *times])
    ids = [str(uuid4()) for _ in builder.branches]
    branches = [
        {
            "id": ids[index],
            "parent_id": ids[branch["parent"]] if branch["parent"] is not None else None,
            "fork_seq": branch["fork_seq"],
            "created_at": _iso(created if index == 0 else branch["created"]),
        }
        for index, branch in enumerate(builder.branches)
    ]
    messages = [
        _message_out(entry, ids[index])
        for index, entries in enumerate(builder.messages)
        for entry in entries
    ]
    document = {
        "format": FORMAT,
        "version": VERSION,
        "exported_at": _iso(timezone.now()),
        "conversation": {
            "id": str(uuid4()),
            "title": title,
            "system_prompt": body.JOIN.join(text for text, _ in builder.instructions),
            "model": "",
            "tools": default_tools(),
            "metadata": _metadata(conversation, full_title),
            "draft": "",
            "created_at": _iso(created),
            "updated_at": _iso(updated),
            "forked_from": None,
            "temperature": None,
            "max_output_tokens": None,
            "active_branch_id": ids[active],
        },
        "branches": branches,
        "messages": messages,
    }
    sources = [entry.node_id for entries in builder.messages for entry in entries]
    return Converted(document=document, sources=sources)


def chatgpt_conversation_convert(conversation: Any, *, base: str = "$") -> Converted:
    """One conversation object of a ChatGPT export as a Parley document. `base` is its
    JSON path in the file (`$[3]`), which every problem's path starts with.

    Raises ValidationFailed (code `invalid_import`) listing every problem found."""
    if not isinstance(conversation, dict):
        kind = validation.type_name(conversation)
        raise ValidationFailed(
            [Problem(base, f"must be a conversation object, not {kind}")], INVALID_IMPORT
        )
    if "mapping" not in conversation:
        raise ValidationFailed([Problem(f"{base}.mapping", "is required")], INVALID_IMPORT)
    tree = tree_read(conversation["mapping"], base=base)
    if isinstance(tree, list):
        raise ValidationFailed(tree, INVALID_IMPORT)
    start = body.epoch_time(conversation.get("create_time")) or timezone.now()
    builder = Builder(base=base, tree=tree, start=start)
    walk(builder)
    prompt = body.JOIN.join(text for text, _ in builder.instructions)
    if builder.instructions:
        where = node_path(base, builder.instructions[0][1]) + ".message.content"
        builder.problems += validation.system_prompt_problems(prompt, path=where)
    if builder.problems:
        raise ValidationFailed(capped(builder.problems, base), INVALID_IMPORT)
    return _document(builder, conversation)


# --- the whole file -------------------------------------------------------------------


@dataclass(frozen=True)
class ChatGPTConversion:
    """One conversation of an export: converted, or the problems that stop it (paths
    into the export file, such as `$[3].mapping.<node>.message.content`)."""

    index: int
    path: str
    title: str
    chatgpt_id: str
    converted: Converted | None
    problems: list[Problem]
    code: str = INVALID_IMPORT.code


@dataclass(frozen=True)
class ChatGPTExport:
    """A parsed export: its conversations, where they sit in the file (`$[{}]` for
    conversations.json, `$` for one conversation object, `$.conversations[{}]` for the
    wrapped form some exports use) and the text problems found in each, by index."""

    conversations: list[Any]
    pattern: str
    text_problems: dict[int, list[Problem]]

    def path(self, index: int) -> str:
        return self.pattern.format(index)


def _container(data: Any) -> tuple[list[Any], str] | None:
    if isinstance(data, list):
        return data, "$[{}]"
    if isinstance(data, dict) and "mapping" in data:
        return [data], "$"
    parley_keys = {"format", "messages", "conversation"}
    if isinstance(data, dict) and isinstance(data.get("conversations"), list):
        return (
            (data["conversations"], "$.conversations[{}]") if not parley_keys & set(data) else None
        )
    return None


def chatgpt_export_detect(document: bytes) -> bool:
    """Whether a body is a ChatGPT export rather than one of Parley's own import forms:
    an array at the top (no Parley form is one), or an object with a `mapping` (or the
    wrapped `{"conversations": [...]}` form). Only such an object is parsed to be sure."""
    start = document.lstrip(b"\xef\xbb\xbf \t\r\n")[:1]
    if start == b"[":
        return True
    if start != b"{" or (b'"mapping"' not in document and b'"conversations"' not in document):
        return False
    try:
        return _container(json_parse(document, check=False)) is not None
    except JsonInputError:
        return False


def _index_of(path: str, pattern: str) -> int | None:
    if pattern == "$":
        return 0
    found = re.match(re.escape(pattern.split("{}")[0]) + r"(\d+)\]", path)
    return int(found.group(1)) if found else None


def chatgpt_export_read(document: bytes, *, max_bytes: int | None = None) -> ChatGPTExport:
    """Parse an export (bytes, at most `max_bytes`: PARLEY_IMPORT_MAX_BYTES by default).

    Raises ValidationFailed when the file as a whole cannot be read: too large, not JSON
    (code `invalid_json`), or not an export at all. Text no database can store and
    nesting past PARLEY_JSON_MAX_DEPTH stop only the conversation they are in."""
    limit = settings.PARLEY_IMPORT_MAX_BYTES if max_bytes is None else max_bytes
    if len(document) > limit:
        message = f"the file is {len(document)} bytes; the limit is {limit}"
        raise ValidationFailed([Problem("$", message)], INVALID_IMPORT)
    try:
        data = json_parse(document, check=False)
    except JsonInputError as exc:
        raise ValidationFailed([Problem(exc.path, exc.message)], INVALID_JSON) from None
    found = _container(data)
    if found is None:
        message = (
            "must be a ChatGPT export: an array of conversations (conversations.json) or "
            f"one conversation object with a mapping, not {validation.type_name(data)}"
        )
        raise ValidationFailed([Problem("$", message)], INVALID_IMPORT)
    conversations, pattern = found
    by_index: dict[int, list[Problem]] = {}
    for problem in json_problems(data):
        index = _index_of(problem.path, pattern)
        if index is not None:
            by_index.setdefault(index, []).append(Problem(problem.path, problem.message))
    return ChatGPTExport(conversations, pattern, by_index)


def conversation_labels(conversation: Any) -> tuple[str, str]:
    """A conversation's title and ChatGPT id as the file states them, for reports."""
    if not isinstance(conversation, dict):
        return "", ""
    title, source = conversation.get("title"), conversation.get("conversation_id")
    source = source if isinstance(source, str) else conversation.get("id")
    title = validation.storable_text(title.strip()) if isinstance(title, str) else ""
    source = validation.storable_text(source) if isinstance(source, str) else ""
    return title[: validation.TITLE_MAX], source[: validation.METADATA_VALUE_MAX]


def chatgpt_export_conversions(export: ChatGPTExport) -> Iterator[ChatGPTConversion]:
    """Each conversation of `export` converted in turn (one at a time, so memory holds one
    converted document however large the export)."""
    for index, item in enumerate(export.conversations):
        path = export.path(index)
        title, chatgpt_id = conversation_labels(item)
        refused = export.text_problems.get(index)
        if refused:
            yield ChatGPTConversion(
                index, path, title, chatgpt_id, None, capped(refused, path), INVALID_JSON.code
            )
            continue
        try:
            converted = chatgpt_conversation_convert(item, base=path)
        except ValidationFailed as exc:
            yield ChatGPTConversion(index, path, title, chatgpt_id, None, exc.problems, exc.code)
            continue
        title = converted.document["conversation"]["title"]
        yield ChatGPTConversion(index, path, title, chatgpt_id, converted, [])


def chatgpt_file_conversions(document: bytes) -> Iterator[ChatGPTConversion]:
    """Every conversation of an export file, converted or with its problems.

    Raises ValidationFailed (on the first step) when the file itself cannot be read."""
    yield from chatgpt_export_conversions(chatgpt_export_read(document))
