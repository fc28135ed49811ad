"""The Open Responses specification (tests/fixtures/openresponses-2026-04-24.json, a copy
of the OpenAPI document published at openresponses.org) as checks of /openai/v1 answers.

Its schemas are JSON Schema 2020-12 (OpenAPI 3.1), checked with `jsonschema`; the OpenAPI
`discriminator` keyword is ignored, as each `oneOf` branch fixes `type` already. Each check
raises an AssertionError naming the schema (`#/components/schemas/<Name>/...`), where in
the object it failed and the failing value.

`SseCheck` reads a stream as it arrives and checks the specification's rules for one:
`event:` equal to the JSON `type`, only the event types the specification lists, each
valid against its schema, `sequence_number` gapless, the lifecycle (`response.created`,
`response.in_progress`, each output item added, streamed and done, one terminal event or
`error`), keep-alives only as comment lines, `data: [DONE]` last, and usage in the
terminal response of a run that reached the model.
"""

import codecs
import json
from collections.abc import Iterable
from functools import cache
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

SPEC_PATH = Path(__file__).resolve().parent.parent / "fixtures/openresponses-2026-04-24.json"
_URI = "urn:openresponses:2026-04-24"
_SCHEMAS = "#/components/schemas"
_VALUE_CHARS = 300

TERMINAL_TYPES = frozenset({"response.completed", "response.failed", "response.incomplete"})
# Statuses of a response whose run reached the model: their usage is known.
_MODEL_REACHED = frozenset({"completed", "incomplete"})
DONE = "[DONE]"


@cache
def spec() -> dict[str, Any]:
    document: dict[str, Any] = json.loads(SPEC_PATH.read_text(encoding="utf-8"))
    return document


@cache
def _registry() -> Registry[Any]:
    resource = Resource.from_contents(spec(), default_specification=DRAFT202012)
    return Registry().with_resource(_URI, resource)


@cache
def _validator(name: str) -> Draft202012Validator:
    if name not in spec()["components"]["schemas"]:
        raise KeyError(f"the specification has no schema {name!r}")
    return Draft202012Validator({"$ref": f"{_URI}{_SCHEMAS}/{name}"}, registry=_registry())


@cache
def stream_event_schemas() -> dict[str, str]:
    """The event types `POST /responses` may stream, by the specification: type → schema."""
    answer = spec()["paths"]["/responses"]["post"]["responses"]["200"]["content"]
    named = {}
    for branch in answer["text/event-stream"]["schema"]["oneOf"]:
        name = branch["$ref"].rsplit("/", 1)[-1]
        (kind,) = spec()["components"]["schemas"][name]["properties"]["type"]["enum"]
        named[kind] = name
    return named


def _value(instance: Any) -> str:
    text = json.dumps(instance, ensure_ascii=False, default=str)
    return text if len(text) <= _VALUE_CHARS else text[: _VALUE_CHARS - 1] + "…"


@cache
def _schema_paths() -> dict[int, str]:
    """Every schema object of the document by identity → its path (`$ref`s are followed
    by the validator without leaving a trace in an error's path: the object it failed in
    says where it is)."""
    paths: dict[int, str] = {}

    def walk(node: Any, path: str) -> None:
        if isinstance(node, dict):
            paths[id(node)] = path
            for key, value in node.items():
                walk(value, f"{path}/{key}")
        elif isinstance(node, list):
            for index, value in enumerate(node):
                walk(value, f"{path}/{index}")

    walk(spec(), "#")
    return paths


def _schema_path(error: ValidationError) -> str:
    """Where in the specification the failing keyword is."""
    where = _schema_paths().get(id(error.schema), "?")
    return f"{where}/{error.validator}"


def _other_kind(error: ValidationError) -> bool:
    """An error saying a branch is for another kind of value: of another JSON type, or an
    object with another `type` tag."""
    if error.validator == "type" and not error.relative_path:
        return True
    return list(error.relative_path) == ["type"] and error.validator in ("enum", "const")


def _deepest(error: ValidationError) -> list[ValidationError]:
    """The errors that say what is wrong: inside a `oneOf`/`anyOf`, those of the one branch
    whose JSON type and `type` tag match (as the OpenAPI discriminator would pick it),
    followed down."""
    if error.validator not in ("oneOf", "anyOf") or not error.context:
        return [error]
    branches: dict[Any, list[ValidationError]] = {}
    for sub in error.context:
        branches.setdefault(sub.schema_path[0], []).append(sub)
    tagged = [errors for errors in branches.values() if not any(map(_other_kind, errors))]
    if len(tagged) == 1:
        return [found for sub in tagged[0] for found in _deepest(sub)]
    return [error]


def schema_problems(name: str, instance: Any) -> list[str]:
    """What in `instance` does not match the specification's schema `name`, one line per
    place (the keys an object lacks said together)."""
    problems: dict[tuple[str, str], list[str]] = {}
    errors = sorted(_validator(name).iter_errors(instance), key=lambda e: list(e.path))
    for found in (found for error in errors for found in _deepest(error)):
        place = (found.json_path, _schema_path(found))
        if found.validator == "required":
            problems.setdefault(place, []).append(repr(found.message.split("'")[1]))
        else:
            problems[place] = [f"{found.message[:_VALUE_CHARS]} (value {_value(found.instance)})"]
    return [
        f"{name} at {where}: "
        + (f"missing {', '.join(said)}" if schema.endswith("/required") else said[0])
        + f" [schema {schema}]"
        for (where, schema), said in problems.items()
    ]


def schema_check(name: str, instance: Any) -> None:
    problems = schema_problems(name, instance)
    if problems:
        raise AssertionError("\n".join(problems))


def response_check(response: Any) -> None:
    schema_check("ResponseResource", response)


def item_check(item: Any) -> None:
    schema_check("ItemField", item)


def compaction_check(compaction: Any) -> None:
    schema_check("CompactResource", compaction)


def event_check(event: Any) -> None:
    kind = event.get("type") if isinstance(event, dict) else None
    name = stream_event_schemas().get(str(kind))
    if name is None:
        raise AssertionError(
            f"event type {kind!r} is not one the specification streams: {_value(event)}"
        )
    schema_check(name, event)


def error_check(body: Any) -> None:
    """An error answer: `{"error": ErrorPayload}` and nothing else."""
    if not isinstance(body, dict) or set(body) != {"error"}:
        raise AssertionError(f'an error answer must be {{"error": {{...}}}}, not {_value(body)}')
    schema_check("ErrorPayload", body["error"])


class SseCheck:
    """A stream's text fed as it arrives (`feed`), checked frame by frame; `end` checks
    what a whole stream must have. `starting_after`: the stream resumes past that event.
    Problems are kept in `problems`, not raised, so a server thread can report them."""

    def __init__(self, *, starting_after: int | None = None) -> None:
        self.problems: list[str] = []
        self.events: list[dict[str, Any]] = []
        self.done = False
        self.resumed = starting_after is not None
        self.next_sequence = 0 if starting_after is None else starting_after + 1
        self._pending = ""
        # Output items by index: added, and done.
        self._opened: set[Any] = set()
        self._closed: set[Any] = set()
        # A character's bytes may arrive in two chunks.
        self._decoder = codecs.getincrementaldecoder("utf-8")()

    @property
    def terminal(self) -> dict[str, Any] | None:
        ends = [e for e in self.events if e.get("type") in TERMINAL_TYPES | {"error"}]
        return ends[0] if ends else None

    def feed(self, text: str | bytes) -> None:
        self._pending += self._decoder.decode(text) if isinstance(text, bytes) else text
        self._pending = self._pending.replace("\r\n", "\n")
        *frames, self._pending = self._pending.split("\n\n")
        for frame in frames:
            self._frame(frame)

    def end(self) -> None:
        if self._pending.strip():
            self._problem(f"the stream ends inside a frame: {self._pending[:_VALUE_CHARS]!r}")
        if not self.done:
            self._problem("the stream does not end with `data: [DONE]`")
        terminal = self.terminal
        if terminal is None:
            self._problem(
                "the stream has no terminal event (response.completed|failed|incomplete or error)"
            )
        elif terminal.get("type") != "error":
            response = terminal.get("response") or {}
            if response.get("status") in _MODEL_REACHED and not response.get("usage"):
                self._problem(f"{terminal['type']} has no usage: {_value(response)}")

    def _problem(self, text: str) -> None:
        self.problems.append(text)

    def _frame(self, frame: str) -> None:
        lines = [line for line in frame.split("\n") if line]
        fields = [line for line in lines if not line.startswith(":")]
        if not fields:
            return  # a comment: a keep-alive
        if self.done:
            self._problem(f"a frame after `data: [DONE]`: {frame[:_VALUE_CHARS]!r}")
            return
        named: dict[str, list[str]] = {}
        for line in fields:
            key, _, value = line.partition(":")
            named.setdefault(key, []).append(value.removeprefix(" "))
        data = "\n".join(named.get("data", []))
        if data == DONE:
            self.done = True
            if set(named) != {"data"}:
                self._problem(f"`data: [DONE]` comes alone, not with {sorted(named)}")
            return
        if "data" not in named:
            self._problem(f"a frame without data that is not a comment: {frame[:_VALUE_CHARS]!r}")
            return
        try:
            event = json.loads(data)
        except ValueError:
            self._problem(f"a frame's data is not JSON: {data[:_VALUE_CHARS]!r}")
            return
        self._event(event, named.get("event", []))

    def _event(self, event: Any, names: list[str]) -> None:
        if not isinstance(event, dict):
            self._problem(f"an event is not an object: {_value(event)}")
            return
        kind = event.get("type")
        if names != [kind]:
            self._problem(f"`event: {' '.join(names)}` does not name the event's type {kind!r}")
        try:
            event_check(event)
        except AssertionError as exc:
            self._problem(str(exc))
        if self.terminal is not None:
            self._problem(f"{kind!r} after the terminal {self.terminal['type']!r}")
        number = event.get("sequence_number")
        if number != self.next_sequence:
            self._problem(f"{kind!r} has sequence_number {number!r}, not {self.next_sequence}")
        self.next_sequence = (number if isinstance(number, int) else self.next_sequence) + 1
        self._lifecycle(str(kind))
        if not self.resumed:
            self._items(str(kind), event)
        self.events.append(event)

    def _lifecycle(self, kind: str) -> None:
        if self.resumed or kind == "error":
            return
        position = len(self.events)
        expected = {0: "response.created", 1: "response.in_progress"}.get(position)
        # A response may end before it starts (cancelled while queued).
        if position == 1 and kind in TERMINAL_TYPES | {"response.queued"}:
            return
        if position == 2 and self.events[1]["type"] == "response.queued":
            expected = "response.in_progress"
        if expected is not None and kind != expected:
            self._problem(f"event {position} is {kind!r}, where the lifecycle has {expected!r}")

    def _items(self, kind: str, event: dict[str, Any]) -> None:
        """Each output item is added, then streamed, then done; all done by the end."""
        index: Any = event.get("output_index")
        if kind == "response.output_item.added":
            if index in self._opened:
                self._problem(f"output item {index} added twice")
            self._opened.add(index)
        elif index is not None and (index not in self._opened or index in self._closed):
            self._problem(f"{kind!r} for output item {index}, which is not open")
        if kind == "response.output_item.done":
            self._closed.add(index)
        if kind in TERMINAL_TYPES and self._opened != self._closed:
            left = sorted(self._opened - self._closed)
            self._problem(f"{kind!r} with output items {left} not done")


def sse_check(
    raw: str | bytes | Iterable[str | bytes], *, starting_after: int | None = None
) -> None:
    """A whole stream, by the specification's rules (see `SseCheck`)."""
    check = SseCheck(starting_after=starting_after)
    for chunk in [raw] if isinstance(raw, str | bytes) else raw:
        check.feed(chunk)
    check.end()
    if check.problems:
        raise AssertionError("\n".join(check.problems))
