"""The tool registry: plain Python functions the model may call.

A tool is a function whose first parameter is a `ToolContext` and whose other parameters
are type-hinted keyword arguments (optionally `Annotated[..., Field(description=...)]`).
`@tool` registers it; the JSON schema of its arguments comes from the hints via pydantic
and its description from the docstring's first paragraph.

`tool_execute` never raises: unknown or disabled tools, bad argument JSON, arguments that
fail validation, a tool that raises and a tool that overruns its time limit all become an
error `ToolResult` the model can read and act on.

Time limits: the tool runs in a daemon worker thread (with its own database connection,
closed when it returns) and the caller stops waiting at the deadline. Python cannot kill a
thread, so an abandoned tool runs on until it returns: tools must be written to finish
(bounded work, timeouts on any I/O). Inside the caller's transaction a tool runs inline
instead (see `_must_run_inline`), where no deadline can be enforced.
"""

import inspect
import json
import logging
import threading
import time
import typing
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, TypeVar, overload

import pydantic
from django.conf import settings
from django.db import connections, transaction
from pydantic.json_schema import GenerateJsonSchema
from pydantic_core import to_jsonable_python

from conversations.json_input import JsonInputError, json_parse_repaired
from conversations.validation import storable_text, type_name

if TYPE_CHECKING:
    from accounts.models import User
    from conversations.models import Conversation

logger = logging.getLogger(__name__)

F = TypeVar("F", bound=Callable[..., Any])
Emit = Callable[[str, dict[str, Any]], None]


def _no_emit(event_type: str, payload: dict[str, Any]) -> None:
    return None


@dataclass(frozen=True)
class ToolContext:
    """What a tool knows about the call it serves."""

    call_id: str
    # True when this call may have started before in an attempt that crashed: a mutating
    # tool must then be safe to run again (same call id, same arguments).
    is_resume: bool
    conversation: "Conversation"
    user: "User"
    # Publishes a run event such as ("draft.updated", {"draft": ...}). Events a tool emits
    # are forwarded in order from the caller's thread once the tool returns.
    emit: Emit = _no_emit


@dataclass(frozen=True)
class ToolResult:
    output: str
    is_error: bool


class ToolError(Exception):
    """Raised by a tool for an expected failure; the model sees `<tool> failed: <message>`."""


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    function: Callable[..., Any]
    arguments: type[pydantic.BaseModel]
    parameters: dict[str, Any]
    # Seconds; None means settings.PARLEY_TOOL_TIMEOUT_SECONDS.
    timeout: float | None = None
    # Changes state outside the conversation's messages (the runner may treat it with care).
    mutating: bool = False
    source: str = field(default="", compare=False)


_REGISTRY: dict[str, Tool] = {}
_REGISTRY_LOCK = threading.Lock()


class _ArgumentsBase(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid", protected_namespaces=())


class _NoTitles(GenerateJsonSchema):
    """Per-field titles only repeat the property names; they cost the model tokens."""

    def field_title_should_be_set(self, schema: Any) -> bool:
        return False


def _first_paragraph(doc: str | None) -> str:
    return " ".join(inspect.cleandoc(doc or "").split("\n\n", 1)[0].split())


def _build(
    function: Callable[..., Any],
    *,
    name: str | None,
    description: str | None,
    timeout: float | None,
    mutating: bool,
) -> Tool:
    tool_name = name or function.__name__
    signature = inspect.signature(function)
    # Resolves string annotations and keeps Annotated metadata (the field descriptions).
    hints = typing.get_type_hints(function, include_extras=True)
    params = list(signature.parameters.values())
    kind = inspect.Parameter
    if not params or params[0].kind not in (kind.POSITIONAL_ONLY, kind.POSITIONAL_OR_KEYWORD):
        raise TypeError(f"tool {tool_name!r}: the first parameter must be the ToolContext")
    fields: dict[str, Any] = {}
    for param in params[1:]:
        if param.kind not in (kind.POSITIONAL_OR_KEYWORD, kind.KEYWORD_ONLY):
            raise TypeError(f"tool {tool_name!r}: parameter {param.name!r} must be a keyword")
        if param.name not in hints:
            raise TypeError(f"tool {tool_name!r}: parameter {param.name!r} needs a type hint")
        default = ... if param.default is inspect.Parameter.empty else param.default
        fields[param.name] = (hints[param.name], default)
    arguments = pydantic.create_model(f"{tool_name}_arguments", __base__=_ArgumentsBase, **fields)
    parameters = arguments.model_json_schema(schema_generator=_NoTitles)
    parameters.pop("title", None)
    parameters.pop("description", None)
    return Tool(
        name=tool_name,
        description=description or _first_paragraph(function.__doc__),
        function=function,
        arguments=arguments,
        parameters=parameters,
        timeout=timeout,
        mutating=mutating,
        source=f"{function.__module__}.{function.__qualname__}",
    )


def _register(entry: Tool) -> None:
    with _REGISTRY_LOCK:
        existing = _REGISTRY.get(entry.name)
        # Re-registering the same function (a module imported or reloaded twice) replaces
        # it; two different functions claiming one name is a programming error.
        if existing is not None and existing.source != entry.source:
            raise ValueError(f"tool {entry.name!r} is already registered by {existing.source}")
        _REGISTRY[entry.name] = entry


@overload
def tool(function: F, /) -> F: ...


@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    timeout: float | None = None,
    mutating: bool = False,
) -> Callable[[F], F]: ...


def tool(
    function: F | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    timeout: float | None = None,
    mutating: bool = False,
) -> F | Callable[[F], F]:
    """Register a tool: `@tool` or `@tool(name=..., timeout=..., mutating=True)`."""

    def decorate(fn: F) -> F:
        _register(
            _build(fn, name=name, description=description, timeout=timeout, mutating=mutating)
        )
        return fn

    return decorate(function) if function is not None else decorate


@contextmanager
def isolated_registry() -> Iterator[None]:
    """For tests: registrations made inside the block are forgotten when it ends."""
    with _REGISTRY_LOCK:
        saved = dict(_REGISTRY)
    try:
        yield
    finally:
        with _REGISTRY_LOCK:
            _REGISTRY.clear()
            _REGISTRY.update(saved)


def tool_get(*, name: str) -> Tool | None:
    return _REGISTRY.get(name)


def _describe(entry: Tool) -> dict[str, Any]:
    return {"name": entry.name, "description": entry.description, "parameters": entry.parameters}


def tool_definitions(names: list[str]) -> list[dict[str, Any]]:
    """OpenAI function-tool definitions for the enabled tools that exist, in registry order."""
    enabled = set(names)
    found = [entry for entry in list(_REGISTRY.values()) if entry.name in enabled]
    return [{"type": "function", "function": _describe(entry)} for entry in found]


def tool_catalog() -> list[dict[str, Any]]:
    """Every registered tool, for GET /api/v1/tools/."""
    return [{**_describe(entry), "mutating": entry.mutating} for entry in list(_REGISTRY.values())]


def _error(message: str) -> ToolResult:
    return ToolResult(output=_clean(message), is_error=True)


def _clean(text: str) -> str:
    """Text every database can store: no NUL, no lone surrogates, bounded length."""
    return _truncate(storable_text(text), max_chars=settings.PARLEY_TOOL_OUTPUT_MAX_CHARS)


def _truncate(text: str, *, max_chars: int) -> str:
    if len(text) <= max_chars:
        return text
    # The marker's length depends on the number it reports; settle it in a few rounds so
    # the whole output stays within max_chars.
    keep = max_chars
    marker = ""
    for _ in range(3):
        marker = f"\n…[truncated: {len(text) - keep} characters cut]"
        keep = max(0, max_chars - len(marker))
    return text[:keep] + marker


def _render(value: Any) -> str:
    if isinstance(value, str):
        return value
    jsonable = to_jsonable_python(value)
    return json.dumps(jsonable, ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def _describe_validation(error: pydantic.ValidationError) -> str:
    problems = []
    for item in error.errors(include_url=False):
        where = ".".join(str(part) for part in item["loc"]) or "arguments"
        problems.append(f"{where}: {item['msg']}")
    return "; ".join(problems)


def _must_run_inline() -> bool:
    """Inside the caller's transaction a tool needs the caller's connection: a second one
    could neither see uncommitted rows nor take row locks the caller holds. A Django
    connection must not be used by two threads at once, so the tool runs in this thread."""
    return transaction.get_connection().in_atomic_block


@dataclass
class _Outcome:
    value: Any = None
    error: BaseException | None = None
    finished: threading.Event = field(default_factory=threading.Event)


def _run_in_thread(
    call: Callable[[], Any],
    *,
    thread_name: str,
    timeout: float,
    keepalive: Callable[[], None] | None,
    keepalive_every: float,
) -> _Outcome:
    outcome = _Outcome()

    def work() -> None:
        try:
            outcome.value = call()
        except BaseException as exc:  # reported to the caller, never lost in the thread
            outcome.error = exc
        finally:
            try:
                # This thread's own connections; nothing else would ever close them.
                connections.close_all()
            finally:
                outcome.finished.set()

    threading.Thread(target=work, name=thread_name, daemon=True).start()
    deadline = time.monotonic() + timeout
    while (left := deadline - time.monotonic()) > 0:
        if outcome.finished.wait(left if keepalive is None else min(left, keepalive_every)):
            break
        if keepalive is not None:
            keepalive()  # may raise: the caller stops waiting, the tool runs on alone
    return outcome


def _run_inline(call: Callable[[], Any]) -> _Outcome:
    outcome = _Outcome()
    try:
        # A savepoint, so a failing tool cannot leave the caller's transaction aborted.
        with transaction.atomic():
            outcome.value = call()
    except Exception as exc:
        outcome.error = exc
    outcome.finished.set()
    return outcome


def tool_execute(
    *,
    name: str,
    arguments: str,
    context: ToolContext,
    enabled: list[str],
    keepalive: Callable[[], None] | None = None,
    keepalive_every: float = 10.0,
) -> ToolResult:
    """Validate and run one tool call; every failure becomes an error result.

    `keepalive` is called every `keepalive_every` seconds while the tool runs (the runner
    renews its lease on the run); what it raises ends the wait and is raised here, and the
    tool's events are then dropped.
    """
    entry = _REGISTRY.get(name)
    usable = ", ".join(n for n in _REGISTRY if n in set(enabled)) or "none"
    if entry is None:
        return _error(f"Unknown tool {name!r}. Available tools: {usable}.")
    if name not in enabled:
        return _error(
            f"Tool {name!r} is not enabled for this conversation. Available tools: {usable}."
        )

    try:
        # Some models send an empty string for a call without arguments. Deep nesting and
        # NaN are refused like a client's; unstorable text is repaired, so a tool never
        # receives a string the database would refuse.
        raw = json_parse_repaired(arguments) if arguments.strip() else {}
    except (JsonInputError, TypeError, AttributeError) as exc:
        return _error(f"Invalid JSON in the arguments for {name}: {exc}. Send a JSON object.")
    if not isinstance(raw, dict):
        return _error(f"The arguments for {name} must be a JSON object, not {type_name(raw)}.")
    try:
        parsed = entry.arguments.model_validate(raw)
    except pydantic.ValidationError as exc:
        return _error(f"Invalid arguments for {name}: {_describe_validation(exc)}")
    # Attributes, not model_dump(): keeps validated values (nested models) as they are.
    kwargs = {key: getattr(parsed, key) for key in type(parsed).model_fields}

    # The tool's events are collected and handed to `emit` from this thread afterwards, in
    # order, so the runner's publisher never runs on a tool thread (nor after a timeout).
    events: list[tuple[str, dict[str, Any]]] = []
    lock = threading.Lock()
    listening = threading.Event()
    listening.set()

    def collect(event_type: str, payload: dict[str, Any]) -> None:
        with lock:
            if listening.is_set():
                events.append((event_type, payload))

    def call() -> Any:
        return entry.function(replace(context, emit=collect), **kwargs)

    timeout = entry.timeout if entry.timeout is not None else settings.PARLEY_TOOL_TIMEOUT_SECONDS
    if _must_run_inline():
        outcome = _run_inline(call)
    else:
        outcome = _run_in_thread(
            call,
            thread_name=f"tool-{name}-{context.call_id}",
            timeout=timeout,
            keepalive=keepalive,
            keepalive_every=keepalive_every,
        )
    # Read once: a tool that finishes from here on is treated as timed out, consistently.
    finished = outcome.finished.is_set()
    with lock:
        listening.clear()  # an abandoned tool's later events are dropped
    _forward(events, emit=context.emit)

    if not finished:
        logger.warning("tool %s (call %s) overran %ss", name, context.call_id, timeout)
        still = " Its effect may still take place." if entry.mutating else ""
        return _error(
            f"{name} timed out: it did not finish within {timeout:g} seconds.{still} "
            "Try a smaller request or a different approach."
        )
    if outcome.error is not None:
        return _error(_failure_message(name, outcome.error))
    try:
        return ToolResult(output=_clean(_render(outcome.value)), is_error=False)
    except (TypeError, ValueError) as exc:
        return _error(f"{name} failed: it returned a value that is not JSON ({exc}).")


def _failure_message(name: str, error: BaseException) -> str:
    if isinstance(error, ToolError):
        return f"{name} failed: {error}"
    logger.warning("tool %s raised", name, exc_info=error)
    return f"{name} failed: {type(error).__name__}: {error}"


def _forward(events: list[tuple[str, dict[str, Any]]], *, emit: Emit) -> None:
    for event_type, payload in events:
        try:
            emit(event_type, payload)
        except Exception:
            # Publishing is best effort; the tool's result must still reach the model.
            logger.exception("could not publish %s from a tool", event_type)


# The built-ins register themselves on import; importing them here means any user of the
# registry sees them. (builtin_tools imports this module, which is complete by now.)
from conversations.llm import builtin_tools  # noqa: E402, F401
