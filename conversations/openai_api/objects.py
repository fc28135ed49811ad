"""Parley's rows as OpenAI's objects: a conversation, its items, lists, models.

A stored message gives one or more items, in this order:

- a user or system message: one `message` item (a context event or a draft-edit notice
  is a system message too: the model reads it, so the client sees it);
- a tool message: one `function_call_output` item;
- an assistant message: a `reasoning` item when the model thought before it (its
  thoughts as `reasoning_text`), a `message` item when it has text or no tool calls
  (with the `phase` the client gave it, if any), then one `function_call` item per tool
  call. Each item's place on the path is (seq, part): part -1 is the reasoning, part 0
  the text, part n + 1 the n-th call.
- a system message holding a compaction (a summary of earlier turns): one `compaction`
  item.

A system message a client sent with role `developer` reads back as `developer`.

A user's message with files shows them after its text, in order: an image as an
`input_image` part, any other file as an `input_file` part, each naming the file by its
`file_id` (`rows_with_files` reads the files of a set of rows in one query).
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from django.conf import settings

from conversations import selectors
from conversations.models import Conversation, Message, StoredFile
from conversations.openai_api.compaction_items import compaction_item
from conversations.openai_api.ids import ItemRef, ItemType, conversation_id, file_id, item_id

COMPLETED = "completed"
# What an assistant message is for, as a client that plans in steps marks it.
PHASES = ("commentary", "final_answer")


@dataclass(frozen=True)
class Item:
    seq: int
    part: int
    ref: ItemRef
    body: dict[str, Any]

    @property
    def position(self) -> tuple[int, int]:
        return self.seq, self.part


def conversation_object(conversation: Conversation) -> dict[str, Any]:
    return {
        "id": conversation_id(conversation.pk),
        "object": "conversation",
        "created_at": int(conversation.created_at.timestamp()),
        "metadata": conversation.metadata or {},
    }


def conversation_deleted(conversation_key: Any) -> dict[str, Any]:
    return {
        "id": conversation_id(conversation_key),
        "object": "conversation.deleted",
        "deleted": True,
    }


def output_text(text: str) -> dict[str, Any]:
    """An `output_text` part: Parley adds no annotations and keeps no log probabilities."""
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def reasoning_item(ref: ItemRef, text: str) -> dict[str, Any]:
    """A `reasoning` item holding what the model thought, as it streamed (no summary)."""
    return {
        "id": item_id(ref),
        "type": "reasoning",
        "summary": [],
        "content": [{"type": "reasoning_text", "text": text}],
    }


def _text_part(role: str, text: str) -> dict[str, Any]:
    if role == Message.Role.ASSISTANT:
        return output_text(text)
    return {"type": "input_text", "text": text}


def _payload(row: Mapping[str, Any]) -> Mapping[str, Any]:
    payload = row.get("provider_payload")
    return payload if isinstance(payload, Mapping) else {}


def _file_part(file: StoredFile) -> dict[str, Any]:
    if file.content_type.startswith("image/"):
        return {
            "type": "input_image",
            "image_url": None,
            "detail": "auto",
            "file_id": file_id(file.pk),
        }
    return {"type": "input_file", "file_id": file_id(file.pk), "filename": file.filename}


def rows_with_files(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """`rows` (`selectors.PATH_ROW_FIELDS` rows), each user message's with its `files`:
    one query for them all."""
    keys = [row["id"] for row in rows if row["role"] == Message.Role.USER]
    files = selectors.attachment_files(message_ids=keys)
    return [{**row, "files": files.get(row["id"], [])} for row in rows]


def message_items(row: Mapping[str, Any], *, owner_id: Any = None) -> list[Item]:
    """The items of one stored message (a `selectors.PATH_ROW_FIELDS` row, with its
    `files` when it has some), in order. A compaction is sealed for its conversation's
    owner: callers listing many pass `owner_id`, saving a query per compaction."""
    key, seq, role = row["id"], row["seq"], row["role"]
    if role == Message.Role.TOOL:
        ref = ItemRef(ItemType.FUNCTION_CALL_OUTPUT, key)
        body = {
            "id": item_id(ref),
            "type": "function_call_output",
            "call_id": row["tool_call_id"],
            "output": row["content"],
            "status": COMPLETED,
        }
        if row["name"]:
            body["name"] = row["name"]
        return [Item(seq, 0, ref, body)]
    if row.get("kind") == Message.Kind.COMPACTION:
        ref = ItemRef(ItemType.COMPACTION, key)
        return [Item(seq, 0, ref, compaction_item(ref, row, owner_id=owner_id))]
    calls = (row["tool_calls"] or []) if role == Message.Role.ASSISTANT else []
    items = []
    payload = _payload(row)
    if role == Message.Role.ASSISTANT and row.get("reasoning"):
        ref = ItemRef(ItemType.REASONING, key)
        items.append(Item(seq, -1, ref, reasoning_item(ref, row["reasoning"])))
    files = row.get("files") or []
    if row["content"] or not calls:
        ref = ItemRef(ItemType.MESSAGE, key)
        text = [_text_part(role, row["content"])] if row["content"] or not files else []
        body = {
            "id": item_id(ref),
            "type": "message",
            "role": "developer"
            if role == Message.Role.SYSTEM and payload.get("role") == "developer"
            else role,
            "status": COMPLETED,
            "content": [*text, *map(_file_part, files)],
        }
        if role == Message.Role.ASSISTANT and payload.get("phase") in PHASES:
            body["phase"] = payload["phase"]
        items.append(Item(seq, 0, ref, body))
    for index, call in enumerate(calls):
        ref = ItemRef(ItemType.FUNCTION_CALL, key, index)
        body = {
            "id": item_id(ref),
            "type": "function_call",
            "call_id": call.get("id", ""),
            "name": call.get("name", ""),
            "arguments": call.get("arguments", ""),
            "status": COMPLETED,
        }
        items.append(Item(seq, index + 1, ref, body))
    return items


def item_list(items: Sequence[Item], *, has_more: bool) -> dict[str, Any]:
    """OpenAI's list of items. Its first and last ids are strings by OpenAI's schema, so
    an empty list gives empty strings."""
    return {
        "object": "list",
        "data": [item.body for item in items],
        "first_id": items[0].body["id"] if items else "",
        "last_id": items[-1].body["id"] if items else "",
        "has_more": has_more,
    }


def file_object(file: StoredFile) -> dict[str, Any]:
    """OpenAI's file object. Every file here is the user's own data, whatever purpose it
    was uploaded for: `user_data`. One no message has used yet is swept once it is
    PARLEY_FILE_ORPHAN_SECONDS old, which `expires_at` says; a file in use has no end of
    its own (it goes with the last message that uses it)."""
    created = int(file.created_at.timestamp())
    orphan: int = settings.PARLEY_FILE_ORPHAN_SECONDS
    return {
        "id": file_id(file.pk),
        "object": "file",
        "bytes": file.size,
        "created_at": created,
        "filename": file.filename,
        "purpose": "user_data",
        "status": "processed",
        "expires_at": created + orphan if file.attached_at is None else None,
    }


def model_objects() -> list[dict[str, Any]]:
    """The model replies come from: the one configured (a conversation may name another
    model, which goes to the same upstream)."""
    return [
        {
            "id": settings.PARLEY_MODEL,
            "object": "model",
            # No creation time is known for a configured name: the epoch says so plainly.
            "created": 0,
            "owned_by": "parley",
        }
    ]
