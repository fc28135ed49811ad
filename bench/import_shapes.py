"""Worst shapes at the import limit: is every import, export and branch read linear in
what it is given?

Builds documents as large as the import allows (PARLEY_IMPORT_MAX_BYTES, and at most
PARLEY_IMPORT_MAX_MESSAGES messages), both as a ChatGPT export and in Parley's own JSON,
in the shapes that cost the most per byte:

- one timestamp: the root's children all created at the same moment;
- deep chain: one path of alternating user and assistant messages, nothing forked;
- staircase: every branch forked from the one before it, so branches nest as deep as
  there are branches (refused past the bound on branch links); and the deepest
  staircase accepted;
- many alternatives: a short path where every reply has hundreds of alternatives;
- binary tree (ChatGPT): every node has two children;
- thoughts fan-out (ChatGPT): a chain of thoughts, then thousands of replies after it,
  each of which would carry those thoughts;
- open calls (Parley): one message making thousands of tool calls, answered one per
  branch.

For each it times the import (`services.conversation_import`, or
`services.conversations_import_chatgpt`), counting its statements and the longest
transaction it held, then the JSON and the Markdown export read to their end, the first
page of the active path with its alternatives, the first page of the branch list and a
switch to the newest branch and back; and the peak memory each shape added (the
process's high-water mark, reset before each shape; Linux only). `--scale` shrinks every
document (0.01: a hundredth of the limits) for trying it out and for the smoke test.

Everything is made as a throwaway `bench-*` user, deleted at the end, also on error. It
measures PostgreSQL (DATABASE_URL); SQLite only with --allow-sqlite.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/parley_shapes \\
        .venv/bin/python -m bench.import_shapes
"""

import argparse
import json
import math
import os
import secrets
import signal
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from bench.common import database_label, database_refused, django_setup, owner_delete, progress

django_setup("config.settings.local")

from django.conf import settings  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection, transaction  # noqa: E402
from django.db.models import Q  # noqa: E402

from accounts.models import User  # noqa: E402
from conversations import selectors, services  # noqa: E402
from conversations.errors import ValidationFailed  # noqa: E402
from conversations.formats import chatgpt, exporting  # noqa: E402
from conversations.formats.import_tree import branch_links_limit  # noqa: E402
from conversations.models import AuditEvent, Branch, Conversation  # noqa: E402
from conversations.validation import storable_text  # noqa: E402
from tests.support.shapes import START, Document  # noqa: E402

PAGE = 200
WORDS = ["the", "quarterly", "numbers", "look", "fine", "but", "churn", "is", "up"]


def _text(index: int) -> str:
    return f"{WORDS[index % len(WORDS)]} {index}"


# --- ChatGPT exports ------------------------------------------------------------------


class ChatGPTDoc:
    """A ChatGPT conversation built node by node (the fields the importer reads)."""

    def __init__(self) -> None:
        self.mapping: dict[str, dict[str, Any]] = {
            "r": {"id": "r", "message": None, "parent": None, "children": []}
        }

    def add(
        self,
        parent: str,
        role: str,
        text: str,
        *,
        when: float,
        content: dict[str, Any] | None = None,
    ) -> str:
        node_id = f"n{len(self.mapping)}"
        self.mapping[node_id] = {
            "id": node_id,
            "message": {
                "id": node_id,
                "author": {"role": role},
                "create_time": when,
                "content": content or {"content_type": "text", "parts": [text]},
                "recipient": "all",
            },
            "parent": parent,
            "children": [],
        }
        self.mapping[parent]["children"].append(node_id)
        return node_id

    def encoded(self) -> bytes:
        conversation = {
            "title": "shape",
            "create_time": START.timestamp(),
            "update_time": START.timestamp() + 1,
            "mapping": self.mapping,
            "current_node": None,
            "conversation_id": str(uuid.uuid4()),
        }
        return json.dumps([conversation], separators=(",", ":")).encode()


def _role(index: int) -> str:
    return "user" if index % 2 == 0 else "assistant"


def chatgpt_one_timestamp(n: int) -> bytes:
    doc, when = ChatGPTDoc(), START.timestamp()
    for index in range(n):
        doc.add("r", "user", _text(index), when=when)
    return doc.encoded()


def chatgpt_deep_chain(n: int) -> bytes:
    doc, node = ChatGPTDoc(), "r"
    for index in range(n):
        node = doc.add(node, _role(index), _text(index), when=START.timestamp() + index)
    return doc.encoded()


def chatgpt_staircase(n: int) -> bytes:
    """Each node's first child is a leaf, its second carries on: every step forks."""
    doc, node = ChatGPTDoc(), "r"
    for index in range(n // 2):
        when = START.timestamp() + index
        doc.add(node, _role(index + 1), _text(index), when=when)
        node = doc.add(node, _role(index + 1), _text(index), when=when + 0.5)
    return doc.encoded()


def chatgpt_many_alternatives(n: int, turns: int = 50) -> bytes:
    doc, node = ChatGPTDoc(), "r"
    replies = max(1, n // turns - 1)
    clock = START.timestamp()
    for turn in range(min(turns, n)):
        clock += 1
        user = doc.add(node, "user", _text(turn), when=clock)
        first = None
        for reply in range(replies):
            clock += 0.001
            made = doc.add(user, "assistant", _text(reply), when=clock)
            first = first or made
        node = first or user
    return doc.encoded()


def chatgpt_binary_tree(n: int) -> bytes:
    doc = ChatGPTDoc()
    ids = ["r"]
    for index in range(n):
        parent = ids[index // 2]
        ids.append(doc.add(parent, _role(len(ids)), _text(index), when=START.timestamp() + index))
    return doc.encoded()


def chatgpt_thoughts_fan_out(n: int, chain: int = 20, chars: int = 2000) -> bytes:
    doc = ChatGPTDoc()
    node = doc.add("r", "user", "think hard", when=START.timestamp())
    for index in range(min(chain, n)):
        thought = {"summary": f"step {index}", "content": "x" * chars}
        content = {"content_type": "thoughts", "thoughts": [thought]}
        node = doc.add(node, "assistant", "", when=START.timestamp() + index, content=content)
    for index in range(max(1, n - chain - 1)):
        doc.add(node, "assistant", _text(index), when=START.timestamp() + chain + index)
    return doc.encoded()


# --- Parley's own JSON ----------------------------------------------------------------


def parley_one_timestamp(n: int) -> bytes:
    doc = Document()
    doc.message(doc.root, 1, "user", _text(0), START)
    for index in range(1, n):
        doc.message(doc.branch(doc.root, 0, START), 1, "user", _text(index), START)
    return doc.encoded()


def parley_deep_chain(n: int) -> bytes:
    doc = Document()
    for index in range(n):
        doc.message(doc.root, index + 1, _role(index), _text(index), START + _us(index))
    return doc.encoded()


def parley_staircase(n: int) -> bytes:
    doc = Document()
    branch = doc.root
    for index in range(n):
        if index:
            branch = doc.branch(branch, index, START + _us(index))
        doc.message(branch, index + 1, _role(index), _text(index), START + _us(index))
    return doc.encoded()


def parley_many_alternatives(n: int, turns: int = 50) -> bytes:
    doc = Document()
    replies = max(1, n // turns - 1)
    for turn in range(min(turns, n)):
        seq = 2 * turn + 1
        doc.message(doc.root, seq, "user", _text(turn), START + _us(seq))
        doc.message(doc.root, seq + 1, "assistant", _text(turn), START + _us(seq + 1))
        for reply in range(replies - 1):
            when = START + _us(seq + 1) + timedelta(seconds=reply + 1)
            fork = doc.branch(doc.root, seq, when)
            doc.message(fork, seq + 1, "assistant", _text(reply), when)
    return doc.encoded(active=doc.root)


def parley_open_calls(n: int) -> bytes:
    doc = Document()
    calls = max(1, n - 2)
    doc.message(doc.root, 1, "user", "call everything", START)
    tool_calls = [{"id": f"c{index}", "name": "f", "arguments": "{}"} for index in range(calls)]
    doc.message(doc.root, 2, "assistant", "", START + _us(1), tool_calls=tool_calls)
    for index in range(calls):
        fork = doc.branch(doc.root, 2, START + _us(index + 2))
        doc.message(
            fork, 3, "tool", "ok", START + _us(index + 2), tool_call_id=f"c{index}", name="f"
        )
    return doc.encoded()


def _us(count: int) -> timedelta:
    return timedelta(microseconds=count)


@dataclass(frozen=True)
class Shape:
    name: str
    format: str  # "chatgpt" or "parley"
    build: Callable[[int], bytes]
    # The message count to build for a scale, when the shape's bound is not the document's
    # size (as for the deepest staircase an import accepts).
    count: Callable[[float], int] | None = None


def _deepest(scale: float) -> int:
    """The depth of the deepest staircase whose branches' chains fit within
    the bound on an import's branch links (shrunk by `scale`): depth * (depth + 1) / 2."""
    links = branch_links_limit() * scale
    return int((math.sqrt(8 * links + 1) - 1) / 2)


SHAPES = [
    Shape("one timestamp", "chatgpt", chatgpt_one_timestamp),
    Shape("deep chain", "chatgpt", chatgpt_deep_chain),
    Shape("staircase", "chatgpt", chatgpt_staircase),
    Shape("deepest staircase", "chatgpt", chatgpt_staircase, lambda s: 2 * _deepest(s)),
    Shape("many alternatives", "chatgpt", chatgpt_many_alternatives),
    Shape("binary tree", "chatgpt", chatgpt_binary_tree),
    Shape("thoughts fan-out", "chatgpt", chatgpt_thoughts_fan_out),
    Shape("one timestamp", "parley", parley_one_timestamp),
    Shape("deep chain", "parley", parley_deep_chain),
    Shape("staircase", "parley", parley_staircase),
    Shape("deepest staircase", "parley", parley_staircase, lambda s: _deepest(s) + 1),
    Shape("many alternatives", "parley", parley_many_alternatives),
    Shape("open calls", "parley", parley_open_calls),
]


def _converted_size(document: bytes) -> int:
    """How large the Parley document a ChatGPT export's first conversation converts to
    (which the import checks against the same limit), or 0 when it does not convert."""
    export = chatgpt.chatgpt_export_read(document, max_bytes=len(document))
    try:
        converted = chatgpt.chatgpt_conversation_convert(export.conversations[0], base="$[0]")
    except ValidationFailed:
        return 0
    return len(json.dumps(converted.document, ensure_ascii=False).encode())


def sized(shape: Shape, scale: float) -> tuple[bytes, int]:
    """The largest document of the shape within the limits shrunk by `scale` (a ChatGPT
    export: whose conversion fits them too, when it converts at all)."""
    if shape.count is not None:
        count = shape.count(scale)
        return shape.build(count), count
    budget = int(settings.PARLEY_IMPORT_MAX_BYTES * scale)
    count = max(4, int(settings.PARLEY_IMPORT_MAX_MESSAGES * scale))
    while True:
        document = shape.build(count)
        size = len(document)
        if size <= budget and shape.format == "chatgpt":
            size = max(size, _converted_size(document))
        if size <= budget or count == 4:
            return document, count
        count = max(4, int(count * budget / size * 0.99))


# --- measuring ------------------------------------------------------------------------


class Transactions:
    """The longest a transaction stayed open (outermost atomic blocks, which on SQLite hold
    the write lock from their start): Django's Atomic, timed while installed."""

    def __init__(self) -> None:
        self.longest = 0.0
        self._started: float | None = None

    @contextmanager
    def installed(self) -> Iterator["Transactions"]:
        enter, exit_ = transaction.Atomic.__enter__, transaction.Atomic.__exit__
        owner = self

        def timed_enter(atomic: transaction.Atomic) -> None:
            if not connection.in_atomic_block:
                owner._started = time.perf_counter()
            enter(atomic)

        def timed_exit(atomic: transaction.Atomic, *exc: Any) -> None:
            exit_(atomic, *exc)
            if not connection.in_atomic_block and owner._started is not None:
                owner.longest = max(owner.longest, time.perf_counter() - owner._started)
                owner._started = None

        transaction.Atomic.__enter__ = timed_enter  # type: ignore[method-assign]
        transaction.Atomic.__exit__ = timed_exit  # type: ignore[method-assign]
        try:
            yield self
        finally:
            transaction.Atomic.__enter__ = enter  # type: ignore[method-assign]
            transaction.Atomic.__exit__ = exit_  # type: ignore[method-assign]


class Statements:
    """Counts the SQL statements run while installed as an execute wrapper."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, execute: Callable[..., Any], *args: Any) -> Any:
        self.count += 1
        return execute(*args)


def _status_kib(field: str) -> int | None:
    try:
        status = Path("/proc/self/status").read_text()
        return int(status.split(f"{field}:", 1)[1].split()[0])
    except (OSError, IndexError, ValueError):
        return None


def peak_reset() -> int | None:
    """Reset the process's memory high-water mark; its resident size now (KiB)."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return None
    return _status_kib("VmRSS")


@dataclass
class Result:
    shape: Shape
    size: int = 0
    messages: int = 0
    branches: int = 0
    nesting: int = 0
    import_s: float = 0.0
    queries: int = 0
    longest_txn_s: float = 0.0
    json_s: float | None = None
    markdown_s: float | None = None
    page_ms: float | None = None
    branch_list_ms: float | None = None
    switch_ms: float | None = None
    peak_mib: float | None = None
    outcome: str = ""


def _timed(call: Callable[[], Any]) -> tuple[float, Any]:
    started = time.perf_counter()
    value = call()
    return time.perf_counter() - started, value


def _attempt(name: str, call: Callable[[], Any], failures: list[str]) -> float | None:
    """Seconds `call` took, or None with why it failed added to `failures`."""
    try:
        return _timed(call)[0]
    except Exception as exc:  # reported in the table: the point is to see which fail
        failures.append(f"{name} failed: {type(exc).__name__}: {str(exc)[:80]}")
        connection.close()  # a failed statement may leave the connection unusable
        return None


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1000


def _drain(chunks: Iterator[str]) -> int:
    return sum(len(chunk) for chunk in map(storable_text, chunks))


def _nesting(conversation: Conversation) -> int:
    rows = Branch.objects.filter(conversation=conversation).values_list("id", "parent_id")
    parents = dict(rows)
    depth: dict[Any, int] = {}
    for key in parents:
        chain = []
        while key is not None and key not in depth:
            chain.append(key)
            key = parents[key]
        level = depth.get(key, -1) if key is not None else -1
        for item in reversed(chain):
            level += 1
            depth[item] = level
    return max(depth.values(), default=0)


def _import(owner: User, shape: Shape, document: bytes) -> Conversation:
    if shape.format == "parley":
        return services.conversation_import(owner=owner, document=document)
    report = services.conversations_import_chatgpt(owner=owner, document=document)
    result = report.results[0]
    if result.conversation is None:
        problems = result.problems()
        raise ValidationFailed(problems or [], message=str(result.error))
    return result.conversation


def measure(owner: User, shape: Shape, scale: float) -> Result:
    result = Result(shape)
    document, _ = sized(shape, scale)
    result.size = len(document)
    baseline = peak_reset()
    transactions = Transactions()
    counter = Statements()
    started = time.perf_counter()
    try:
        with transactions.installed(), connection.execute_wrapper(counter):
            conversation = _import(owner, shape, document)
    except ValidationFailed as exc:
        first = exc.problems[0] if exc.problems else exc
        result.outcome = f"refused: {str(first)[:90]}"
        return _peak(_imported(result, started, counter, transactions), baseline)
    _imported(result, started, counter, transactions)
    del document
    conversation = Conversation.objects.get(pk=conversation.pk)
    result.messages = conversation.message_count
    result.branches = conversation.branch_count
    result.nesting = _nesting(conversation)
    newest = Branch.objects.filter(conversation=conversation).order_by("-created_at").first()
    active = conversation.active_branch_id
    assert newest is not None
    assert active is not None

    def switch() -> None:
        services.branch_switch(conversation=conversation, branch_id=newest.pk)
        services.branch_switch(conversation=conversation, branch_id=active)

    failures: list[str] = []
    result.json_s = _attempt(
        "JSON export", lambda: _drain(exporting.export_json_chunks(conversation)), failures
    )
    result.markdown_s = _attempt(
        "Markdown export", lambda: _drain(exporting.export_markdown_chunks(conversation)), failures
    )
    result.page_ms = _ms(
        _attempt(
            "page",
            lambda: selectors.message_rows_page(conversation=conversation, after=0, limit=PAGE),
            failures,
        )
    )
    result.branch_list_ms = _ms(
        _attempt(
            "branch list",
            lambda: selectors.branch_page(conversation=conversation, limit=50),
            failures,
        )
    )
    switched = _attempt("switch", switch, failures)
    result.switch_ms = None if switched is None else switched * 1000 / 2
    result.outcome = "; ".join(["imported", *failures])
    services.conversation_delete(conversation=conversation)
    return _peak(result, baseline)


def _imported(result: Result, started: float, counter: "Statements", txns: Transactions) -> Result:
    result.import_s = time.perf_counter() - started
    result.queries = counter.count
    result.longest_txn_s = txns.longest
    return result


def _peak(result: Result, baseline: int | None) -> Result:
    high = _status_kib("VmHWM")
    if baseline is not None and high is not None:
        result.peak_mib = max(0, high - baseline) / 1024
    return result


def _cell(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def report(results: list[Result], scale: float) -> None:
    print(
        f"bench.import_shapes on {database_label()}, {os.cpu_count()} CPUs, scale {scale:g}: "
        f"documents up to {settings.PARLEY_IMPORT_MAX_BYTES * scale / 2**20:,.2f} MiB and "
        f"{int(settings.PARLEY_IMPORT_MAX_MESSAGES * scale):,} messages\n"
    )
    print(
        "| shape | format | MiB | messages | branches | nesting | import s | statements "
        "| longest transaction s | JSON export s | Markdown export s | page ms | branch list ms "
        "| switch ms | peak MiB | outcome |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for r in results:
        print(
            f"| {r.shape.name} | {r.shape.format} | {r.size / 2**20:,.2f} | {r.messages:,} "
            f"| {r.branches:,} | {r.nesting:,} | {r.import_s:,.2f} | {r.queries:,} "
            f"| {r.longest_txn_s:,.2f} | {_cell(r.json_s)} | {_cell(r.markdown_s)} "
            f"| {_cell(r.page_ms, 1)} | {_cell(r.branch_list_ms, 1)} | {_cell(r.switch_ms, 1)} "
            f"| {_cell(r.peak_mib, 0)} | {r.outcome} |"
        )


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--scale", type=float, default=1.0, help="fraction of the import limits (default 1)"
    )
    names = sorted({f"{s.format}:{s.name}" for s in SHAPES})
    parser.add_argument(
        "--shapes", default="", help=f"comma-separated subset of: {', '.join(names)}"
    )
    parser.add_argument("--allow-sqlite", action="store_true", help="run on a non-PostgreSQL DB")
    args = parser.parse_args()
    if not 0 < args.scale <= 1:
        parser.error("--scale must be in (0, 1]")
    wanted = {name.strip() for name in args.shapes.split(",") if name.strip()}
    unknown = wanted - set(names)
    if unknown:
        parser.error(f"unknown shapes: {', '.join(sorted(unknown))}")
    args.selected = [s for s in SHAPES if not wanted or f"{s.format}:{s.name}" in wanted]
    return args


def main() -> int:
    args = parse_args()
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(f"stopped by signal {signum}"))
    if database_refused("import_shapes", args.allow_sqlite):
        return 2
    call_command("migrate", interactive=False, verbosity=0)
    owner = User.objects.create_user(username=f"bench-shapes-{secrets.token_hex(4)}")
    results: list[Result] = []
    try:
        for shape in args.selected:
            progress(f"{shape.format}: {shape.name}…")
            results.append(measure(owner, shape, args.scale))
        report(results, args.scale)
    finally:
        # The imports' and deletions' audit entries outlive the conversations: a
        # benchmark's must not.
        AuditEvent.objects.filter(Q(owner_id=owner.pk) | Q(actor_id=owner.pk)).delete()
        owner_delete(owner)
    return 0


if __name__ == "__main__":
    sys.exit(main())
