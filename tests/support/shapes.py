"""Export documents in the shapes that cost an import, an export or a branch read the most
per byte: many branches sharing one time, branches each forked from the one before,
many open tool calls answered one per branch, long chains."""

import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from conversations.formats.exporting import FORMAT

START = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)


class Document:
    """A version 2 export built branch by branch; the root branch is made first."""

    def __init__(self) -> None:
        self.branches: list[dict[str, Any]] = []
        self.messages: list[dict[str, Any]] = []
        self.root = self.branch(None, 0, START)

    def branch(self, parent: str | None, fork_seq: int, when: datetime) -> str:
        key = str(uuid.uuid4())
        self.branches.append(
            {"id": key, "parent_id": parent, "fork_seq": fork_seq, "created_at": when.isoformat()}
        )
        return key

    def message(
        self, branch: str, seq: int, role: str, content: str, when: datetime = START, **extra: Any
    ) -> None:
        self.messages.append(
            {
                "id": str(uuid.uuid4()),
                "branch_id": branch,
                "seq": seq,
                "role": role,
                "kind": "message",
                "content": content,
                "reasoning": "",
                "reasoning_ms": None,
                "tool_calls": extra.get("tool_calls", []),
                "tool_call_id": extra.get("tool_call_id"),
                "name": extra.get("name"),
                "created_at": when.isoformat(),
                "run_id": None,
                "usage": None,
                "provider_payload": None,
            }
        )

    def encoded(self, active: str | None = None) -> bytes:
        """The document, its messages in the order of their branches."""
        order = {row["id"]: index for index, row in enumerate(self.branches)}
        messages = sorted(self.messages, key=lambda m: (order[m["branch_id"]], m["seq"]))
        return json.dumps(
            {
                "format": FORMAT,
                "version": 2,
                "exported_at": START.isoformat(),
                "conversation": {
                    "id": str(uuid.uuid4()),
                    "title": "shape",
                    "system_prompt": "",
                    "model": "",
                    "tools": [],
                    "metadata": {},
                    "draft": "",
                    "created_at": START.isoformat(),
                    "updated_at": START.isoformat(),
                    "forked_from": None,
                    "temperature": None,
                    "max_output_tokens": None,
                    "active_branch_id": active or self.branches[-1]["id"],
                },
                "branches": self.branches,
                "messages": messages,
            }
        ).encode()


def siblings(count: int) -> bytes:
    """The root's first message and `count` - 1 alternatives of it, every branch and
    message created at the same moment; the root active."""
    document = Document()
    document.message(document.root, 1, "user", "version 0")
    for index in range(1, count):
        document.message(document.branch(document.root, 0, START), 1, "user", f"version {index}")
    return document.encoded(active=document.root)


def staircase(depth: int) -> bytes:
    """`depth` + 1 branches, each forked from the one before at its only message: the
    last one's path (active) crosses `depth` forks."""
    document = Document()
    branch = document.root
    for index in range(depth + 1):
        when = START + timedelta(microseconds=index)
        if index:
            branch = document.branch(branch, index, when)
        document.message(
            branch, index + 1, "user" if index % 2 == 0 else "assistant", f"step {index}", when
        )
    return document.encoded()


def open_calls(count: int) -> bytes:
    """An assistant message making `count` tool calls, then `count` branches forked after
    it, each answering one of them."""
    document = Document()
    document.message(document.root, 1, "user", "call them all")
    calls = [{"id": f"c{index}", "name": "f", "arguments": "{}"} for index in range(count)]
    document.message(document.root, 2, "assistant", "", tool_calls=calls)
    for index in range(count):
        fork = document.branch(document.root, 2, START + timedelta(microseconds=index + 1))
        document.message(fork, 3, "tool", "ok", tool_call_id=f"c{index}", name="f")
    return document.encoded(active=document.root)
