"""Helpers for the ChatGPT import tests: the fixture export, a small builder of ChatGPT
mappings, and readers of a branch tree (in a converted document and as stored)."""

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "chatgpt" / "conversations.json"

# The fixture's conversations, by index.
LINEAR, EDITED, PICTURE, TOOLS, REASONING, CYCLE, MISSING_PARENT = range(7)


def fixture_bytes() -> bytes:
    return FIXTURE.read_bytes()


def fixture() -> list[dict[str, Any]]:
    data: list[dict[str, Any]] = json.loads(fixture_bytes())
    return data


def text(*parts: Any) -> dict[str, Any]:
    return {"content_type": "text", "parts": list(parts)}


class Chat:
    """A ChatGPT conversation built node by node: `add` returns the new node's id."""

    def __init__(self, title: str = "Test chat", start: float = 1_700_000_000.0) -> None:
        self.title, self.start, self.clock = title, start, start
        self.mapping: dict[str, Any] = {
            "root": {"id": "root", "message": None, "parent": None, "children": []}
        }

    def add(
        self,
        parent: str,
        role: str,
        content: Any,
        *,
        node_id: str | None = None,
        name: str | None = None,
        recipient: str = "all",
        metadata: dict[str, Any] | None = None,
        create_time: float | None = -1,
    ) -> str:
        node_id = node_id or f"n{len(self.mapping)}"
        self.clock += 10
        content = text(content) if isinstance(content, str) else content
        self.mapping[node_id] = {
            "id": node_id,
            "message": {
                "id": node_id,
                "author": {"role": role, "name": name, "metadata": {}},
                "create_time": self.clock if create_time == -1 else create_time,
                "update_time": None,
                "content": content,
                "status": "finished_successfully",
                "end_turn": None,
                "weight": 1.0,
                "metadata": metadata or {},
                "recipient": recipient,
            },
            "parent": parent,
            "children": [],
        }
        self.mapping[parent]["children"].append(node_id)
        return node_id

    def hidden_system(self) -> str:
        return self.add(
            "root",
            "system",
            text(""),
            metadata={"is_visually_hidden_from_conversation": True},
            create_time=None,
        )

    def conversation(self, current: Any = None, **extra: Any) -> dict[str, Any]:
        found = {
            "title": self.title,
            "create_time": self.start,
            "update_time": self.clock + 5,
            "mapping": self.mapping,
            "current_node": current,
            "conversation_id": "c0ffee00-0000-4000-8000-000000000001",
            "id": "c0ffee00-0000-4000-8000-000000000001",
            "default_model_slug": "gpt-4o",
        }
        found.update(extra)
        return found


# --- a converted document's tree ---------------------------------------------------------


def document_paths(document: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """Each branch's path (its parent's path up to fork_seq, then its own messages)."""
    branches = {branch["id"]: branch for branch in document["branches"]}
    own: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for message in document["messages"]:
        own[message["branch_id"]].append(message)
    paths: dict[str, list[dict[str, Any]]] = {}
    for branch_id, branch in branches.items():  # parents come first
        parent = branch["parent_id"]
        prefix = paths[parent][: branch["fork_seq"]] if parent else []
        paths[branch_id] = prefix + sorted(own[branch_id], key=lambda m: m["seq"])
    return paths


def active_path(document: dict[str, Any]) -> list[dict[str, Any]]:
    return document_paths(document)[document["conversation"]["active_branch_id"]]


def contents(path: list[dict[str, Any]]) -> list[str]:
    return [message["content"] for message in path]


def check_document(document: dict[str, Any]) -> None:
    """The contract of a version 2 document with branches, checked by hand."""
    branches = document["branches"]
    assert branches
    assert branches[0]["parent_id"] is None
    assert branches[0]["fork_seq"] == 0
    order = {branch["id"]: index for index, branch in enumerate(branches)}
    own: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for message in document["messages"]:
        own[message["branch_id"]].append(message)
    # Grouped by branch in the order of the branches, seq ascending within each.
    grouping = [order[m["branch_id"]] for m in document["messages"]]
    assert grouping == sorted(grouping)
    for branch in branches[1:]:
        parent = branch["parent_id"]
        assert order[parent] < order[branch["id"]], "a parent comes before its children"
        # Normalised: the parent owns the message at fork_seq, or it forks the root at 0.
        owned = {m["seq"] for m in own[parent]}
        assert branch["fork_seq"] in owned or (branch["fork_seq"] == 0 and order[parent] == 0), (
            branch
        )
        assert own[branch["id"]], "every fork has messages of its own"
    for branch in branches:
        seqs = [m["seq"] for m in own[branch["id"]]]
        assert seqs == list(range(branch["fork_seq"] + 1, branch["fork_seq"] + 1 + len(seqs)))
    for path in document_paths(document).values():
        pending: set[str] = set()
        for message in path:
            for call in message["tool_calls"]:
                json.loads(call["arguments"])
                pending.add(call["id"])
            if message["role"] == "tool":
                assert message["tool_call_id"] in pending, "a result answers an earlier call"
                pending.discard(message["tool_call_id"])
            else:
                assert message["tool_call_id"] is None
            assert message["kind"] == "message" or message["role"] == "system"


def leaves(mapping: dict[str, Any]) -> int:
    return sum(1 for node in mapping.values() if not node["children"])


# --- the stored tree (the branch storage's contract) -------------------------------------


def stored_paths(conversation: Any) -> dict[Any, list[Any]]:
    """Each stored branch's path, read from Branch and Message rows."""
    from conversations.models import Branch, Message

    branches = {b.id: b for b in Branch.objects.filter(conversation=conversation)}
    own: dict[Any, list[Any]] = defaultdict(list)
    for message in Message.objects.filter(conversation=conversation).order_by("seq"):
        own[message.branch_id].append(message)
    paths: dict[Any, list[Any]] = {}

    def path(branch_id: Any) -> list[Any]:
        if branch_id not in paths:
            branch = branches[branch_id]
            prefix = path(branch.parent_id)[: branch.fork_seq] if branch.parent_id else []
            paths[branch_id] = prefix + own[branch_id]
        return paths[branch_id]

    for branch_id in branches:
        path(branch_id)
    return paths
