"""The walk over one ChatGPT conversation's node tree that lays its messages out as Parley
branches (the rules are in formats/chatgpt.py's docstring)."""

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from uuid import uuid4

from django.conf import settings

from conversations import validation
from conversations.errors import Problem
from conversations.formats import chatgpt_content as body
from conversations.formats.chatgpt_tree import Tree, node_path

SOURCE = "chatgpt"


@dataclass
class Entry:
    """A Parley message being built: where it sits and what it says."""

    number: int
    branch: int
    seq: int
    node_id: str
    created: datetime
    fields: dict[str, Any]
    call_id: str = ""


@dataclass(frozen=True)
class _Reasoning:
    """Thinking seen on the path and not yet attached to an assistant message: its last
    node, linked to the thinking nodes before it. Paths through a chain of thinking share
    its links, so a chain costs one link per node however long it grows."""

    node: str
    thought: str  # "" when the node is not a `thoughts` node with text
    recap: str
    ms: int | None
    created: datetime
    previous: "_Reasoning | None" = None
    # Characters text() and payload() hold: the node ids and the thoughts.
    size: int = 0

    def _links(self) -> list["_Reasoning"]:
        links: list[_Reasoning] = []
        link: _Reasoning | None = self
        while link is not None:
            links.append(link)
            link = link.previous
        links.reverse()
        return links

    def text(self) -> str:
        thoughts = [link.thought for link in self._links() if link.thought]
        return body.JOIN.join(thoughts) if thoughts else self.recap

    def payload(self) -> dict[str, Any]:
        links = self._links()
        extra: dict[str, Any] = {"chatgpt_reasoning_nodes": [link.node for link in links]}
        if self.recap and any(link.thought for link in links):
            extra["chatgpt_reasoning_recap"] = self.recap
        return extra


@dataclass
class Builder:
    base: str
    tree: Tree
    start: datetime
    branches: list[dict[str, Any]] = field(default_factory=list)
    messages: list[list[Entry]] = field(default_factory=list)
    used: dict[int, int] = field(default_factory=dict)
    orphans: dict[tuple[int, str], Entry] = field(default_factory=dict)
    positions: dict[str, Entry | None] = field(default_factory=dict)
    instructions: list[tuple[str, str]] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    count: int = 0
    # Characters of text the document holds so far (contents, reasoning, its node ids).
    size: int = 0
    known_instructions: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        self._branch(parent=None, fork_seq=0, created=self.start)

    def _branch(self, *, parent: int | None, fork_seq: int, created: datetime) -> int:
        self.branches.append({"parent": parent, "fork_seq": fork_seq, "created": created})
        self.messages.append([])
        return len(self.branches) - 1

    def place(
        self, anchor: Entry | None, node_id: str, created: datetime, fields: dict[str, Any]
    ) -> Entry:
        """The next message after `anchor`: its first follower continues the anchor's
        branch, every later one forks a new branch at the anchor."""
        key = anchor.number if anchor else 0
        followers = self.used.get(key, 0)
        self.used[key] = followers + 1
        parent, fork_seq = (anchor.branch, anchor.seq) if anchor else (0, 0)
        if followers == 0:
            branch = parent
        else:
            branch = self._branch(parent=parent, fork_seq=fork_seq, created=created)
        self.count += 1
        self.grow(len(fields["content"]))
        entry = Entry(self.count, branch, fork_seq + 1, node_id, created, fields)
        self.messages[branch].append(entry)
        path = node_path(self.base, node_id) + ".message.content"
        self.problems += validation.content_problems(fields["content"], path=path)
        return entry

    def flush(self, anchor: Entry | None, pending: _Reasoning) -> Entry:
        """Thinking with no assistant message after it: an assistant message of its own,
        once per point in the tree however many paths pass through it."""
        key = (anchor.number if anchor else 0, pending.node)
        if key not in self.orphans:
            fields = _fields("assistant", "", payload={"source": SOURCE})
            entry = self.place(anchor, pending.node, pending.created, fields)
            self.reason(entry, pending)
            self.orphans[key] = entry
        return self.orphans[key]

    def reason(self, entry: Entry, pending: _Reasoning) -> None:
        # Counted before it is copied: thinking shared by many replies is copied to each.
        if not self.grow(pending.size):
            return
        entry.fields.update(reasoning=pending.text(), reasoning_ms=pending.ms)
        entry.fields["provider_payload"].update(pending.payload())
        path = node_path(self.base, pending.node) + ".message.content"
        self.problems += validation.content_problems(entry.fields["reasoning"], path=path)

    def grow(self, chars: int) -> bool:
        """Count text the document will hold; False (reported once) past
        PARLEY_IMPORT_MAX_BYTES, the most any document to import may hold, so that a
        conversion copying text many times stops before it fills the memory."""
        limit = settings.PARLEY_IMPORT_MAX_BYTES
        reported = self.full
        self.size += chars
        if self.size <= limit:
            return True
        if not reported:
            message = f"converts to more than {limit} characters of text; the limit is {limit}"
            self.problems.append(Problem(f"{self.base}.mapping", message))
        return False

    @property
    def full(self) -> bool:
        return self.size > settings.PARLEY_IMPORT_MAX_BYTES


def _fields(role: str, content: str, *, kind: str = "message", **extra: Any) -> dict[str, Any]:
    return {
        "role": role,
        "kind": kind,
        "content": content,
        "reasoning": "",
        "reasoning_ms": None,
        "tool_calls": extra.get("tool_calls", []),
        "tool_call_id": extra.get("tool_call_id"),
        "name": extra.get("name"),
        "provider_payload": extra.get("payload"),
    }


def _payload(node_id: str, message: dict[str, Any], found: body.Body) -> dict[str, Any]:
    """What is worth keeping of ChatGPT's own record of a message."""
    payload: dict[str, Any] = {"source": SOURCE, "chatgpt_node_id": node_id}
    metadata = message.get("metadata")
    model_slug = metadata.get("model_slug") if isinstance(metadata, dict) else None
    for key, value in (
        ("chatgpt_message_id", message.get("id")),
        ("content_type", body.content_type(message)),
        ("model_slug", model_slug),
        ("status", message.get("status")),
    ):
        if isinstance(value, str) and value:
            payload[key] = value
    if found.assets:
        payload["chatgpt_assets"] = found.assets
    if not found.understood:
        payload["chatgpt_content"] = message.get("content")
    return payload


def _role(message: dict[str, Any]) -> tuple[str, str]:
    author = message["author"]
    name = author.get("name")
    return author["role"], name if isinstance(name, str) else ""


def _hidden(message: dict[str, Any]) -> bool:
    metadata = message.get("metadata")
    return isinstance(metadata, dict) and bool(metadata.get("is_visually_hidden_from_conversation"))


def _visit(
    builder: Builder,
    node_id: str,
    anchor: Entry | None,
    pending: _Reasoning | None,
    when: datetime,
) -> tuple[Entry | None, _Reasoning | None, datetime]:
    """One node: the message it adds (the new anchor), the thinking still waiting for an
    assistant message, and the time its followers default to."""
    message = builder.tree.nodes[node_id].get("message")
    if message is None:
        return anchor, pending, when
    created = body.epoch_time(message.get("create_time")) or when
    kind = body.content_type(message)
    role, author_name = _role(message)
    if kind == body.INSTRUCTIONS_TYPE:
        text = body.instructions_text(message)
        if text and text not in builder.known_instructions:
            builder.known_instructions.add(text)
            builder.instructions.append((text, node_id))
        return anchor, pending, when
    if kind in body.REASONING_TYPES:
        thought = body.reasoning_text(message)
        kept = thought if kind == "thoughts" else ""
        following = _Reasoning(
            node=node_id,
            thought=kept,
            recap=thought if kind == "reasoning_recap" else (pending.recap if pending else ""),
            ms=body.reasoning_ms(message) or (pending.ms if pending else None),
            created=created,
            previous=pending,
            size=(pending.size if pending else 0) + len(node_id) + len(kept) + len(body.JOIN),
        )
        return anchor, following, created
    found = body.message_body(message)
    files, attachments = body.attachment_placeholders(message, found.assets)
    text = body.JOIN.join(t for t in (files, found.text) if t)
    payload = _payload(node_id, message, found)
    if attachments:
        payload["chatgpt_attachments"] = attachments
    recipient = message.get("recipient")
    if role == "system":
        if _hidden(message) or not text.strip():
            return anchor, pending, when
        fields = _fields("system", text, kind="event", payload=payload)
    elif role == "user":
        if pending is not None:
            anchor, pending = builder.flush(anchor, pending), None
        fields = _fields("user", text, payload=payload)
    elif role == "assistant" and isinstance(recipient, str) and recipient not in ("", "all"):
        argument = "code" if kind == "code" else "input"
        call = {
            "id": f"call_{uuid4().hex}",
            "name": recipient,
            "arguments": json.dumps({argument: found.text}, ensure_ascii=False),
        }
        payload["recipient"] = recipient
        builder.problems += validation.text_problems(
            recipient,
            path=node_path(builder.base, node_id) + ".message.recipient",
            max_chars=validation.TOOL_NAME_MAX,
        )
        fields = _fields("assistant", "", tool_calls=[call], payload=payload)
    elif role == "assistant":
        shown = body.fenced(text, body.code_language(message)) if kind == "code" else text
        fields = _fields("assistant", shown, payload=payload)
    elif role == "tool" and anchor is not None and anchor.call_id:
        # Right after its call: the call's result.
        name = author_name or anchor.fields["tool_calls"][0]["name"]
        builder.problems += validation.text_problems(
            name,
            path=node_path(builder.base, node_id) + ".message.author.name",
            max_chars=validation.TOOL_NAME_MAX,
        )
        fields = _fields("tool", text, tool_call_id=anchor.call_id, name=name, payload=payload)
    else:
        # Tool output that answers no call, or an author Parley has no role for.
        label = f"{author_name or 'tool'} output" if role == "tool" else role
        fields = _fields("system", f"[{label}]{body.JOIN}{text}", kind="event", payload=payload)
    entry = builder.place(anchor, node_id, created, fields)
    if fields["tool_calls"]:
        entry.call_id = fields["tool_calls"][0]["id"]
    if role == "assistant" and pending is not None:
        builder.reason(entry, pending)
        pending = None
    return entry, pending, created


def walk(builder: Builder) -> None:
    """Depth first from the root, children in order, so each branch is complete before
    the branches forked from it start."""
    limit = settings.PARLEY_IMPORT_MAX_MESSAGES
    root = builder.tree.root
    stack: list[tuple[str, Entry | None, _Reasoning | None, datetime]] = (
        [(root, None, None, builder.start)] if root is not None else []
    )
    while stack:
        node_id, anchor, pending, when = stack.pop()
        anchor, pending, when = _visit(builder, node_id, anchor, pending, when)
        children = builder.tree.children[node_id]
        if pending is not None and not children:
            anchor, pending = builder.flush(anchor, pending), None
        builder.positions[node_id] = anchor
        if builder.count > limit:
            message = f"has more than {limit} messages; the limit is {limit}"
            builder.problems.append(Problem(f"{builder.base}.mapping", message))
            return
        if builder.full:
            return
        stack.extend((child, anchor, pending, when) for child in reversed(children))


def branch_path(builder: Builder, branch: int) -> Iterator[Entry]:
    """A branch's path: its ancestors' messages up to each fork point, then its own."""
    chain: list[tuple[int, int | None]] = [(branch, None)]
    while (parent := builder.branches[chain[-1][0]]["parent"]) is not None:
        chain.append((parent, builder.branches[chain[-1][0]]["fork_seq"]))
    for index, upto in reversed(chain):
        yield from (e for e in builder.messages[index] if upto is None or e.seq <= upto)


def active_branch(builder: Builder, current: Any) -> int:
    if isinstance(current, str) and current in builder.positions:
        entry = builder.positions[current]
        return entry.branch if entry else 0
    tips = [(m[-1].created, index) for index, m in enumerate(builder.messages) if m]
    return max(tips)[1] if tips else 0
