"""The tool registry: plain Python functions the model may call.

A tool is a function whose first parameter is a `ToolContext` and whose other parameters
are type-hinted keyword arguments (optionally `Annotated[..., Field(description=...)]`).
`@tool` registers it; the JSON schema of its arguments comes from the hints via pydantic
and its description from the docstring's first paragraph.

Tools registered here are the process's own; a `ToolSource` adds tools that exist per
user (a tool server's, tools/servers.py, added when the app is ready), looked up by name
with the user asking. Running a call is tools/execute.py's (`tool_execute`, which never
raises).
"""

import inspect
import logging
import threading
import typing
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, overload

import pydantic
from pydantic.json_schema import GenerateJsonSchema

from conversations.errors import Problem
from conversations.validation import type_name

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
    # The conversation's draft_edit_count when the model call that asked for this tool
    # read its input (Run.draft_edits_seen): a user edit made after that moment is one the
    # model has not seen, and `update_draft` must not write over it. None: unknown.
    draft_edits_seen: int | None = None
    # False for a reply kept nowhere (stateless chat, a response with `store: false`):
    # `conversation` is then unsaved, and what a tool changes on it lasts as long as the
    # request (a stateless state carries the draft on).
    stored: bool = True
    # Set when the run is stopped while the tool runs (`tool_execute` then stops waiting
    # for it): a tool waiting on I/O watches it to give up at once.
    stop: threading.Event = field(default_factory=threading.Event, compare=False)


@dataclass(frozen=True)
class ToolImage:
    """An image a tool returned. A stored run keeps it as a file of the conversation's
    owner on the tool's result; the model reads only the text, which names it."""

    filename: str
    data: bytes = field(repr=False)


@dataclass(frozen=True)
class ToolOutput:
    """What a tool returns when it has images besides its text."""

    text: str
    images: tuple[ToolImage, ...] = ()


@dataclass(frozen=True)
class ToolResult:
    output: str
    is_error: bool
    images: tuple[ToolImage, ...] = ()
    # The run was stopped while the call ran: the call was abandoned, and the run ends.
    cancelled: bool = False


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
    # Enabled in a new conversation unless it names its own tools.
    enabled_by_default: bool = False
    source: str = field(default="", compare=False)
    # Whether a call a crash may have cut short is sent again (with `is_resume`); if not,
    # its result is the `interrupted` tool error. The built-ins handle `is_resume`.
    resendable: bool = True
    # The tool server it belongs to (metrics count its calls by server); "" for our own.
    server: str = ""


class ToolSource(Protocol):
    """Tools that exist per user, beside the registered ones (a tool server's)."""

    def claims(self, name: str) -> bool:
        """Whether `name` has the form of this source's tools."""
        ...

    def tools_for(self, *, user: "User") -> list[Tool]:
        """Every tool of the source `user` may enable."""
        ...

    def tools_named(self, *, names: list[str], user: "User") -> list[Tool]:
        """Those of `names` that are tools `user` may use, in that order."""
        ...

    def tool_called(self, *, name: str, user: "User") -> Tool | None:
        """The tool a call by `user` names: as `tools_named` finds it, or one that may
        exist though the source cannot confirm it now (its call will tell)."""
        ...

    def name_problem(self, *, name: str, user: "User | None") -> str | None:
        """Why `user` may not enable `name` (one it claims), or None. Without a user
        (an imported document) only the form can be checked."""
        ...


_REGISTRY: dict[str, Tool] = {}
_REGISTRY_LOCK = threading.Lock()
_SOURCES: list[ToolSource] = []


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
    enabled_by_default: bool = False,
) -> Callable[[F], F]: ...


def tool(
    function: F | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    timeout: float | None = None,
    mutating: bool = False,
    enabled_by_default: bool = False,
) -> F | Callable[[F], F]:
    """Register a tool: `@tool` or `@tool(name=..., timeout=..., mutating=True)`."""

    def decorate(fn: F) -> F:
        entry = _build(fn, name=name, description=description, timeout=timeout, mutating=mutating)
        _register(replace(entry, enabled_by_default=enabled_by_default))
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


def tool_source_add(source: ToolSource) -> None:
    """Add a source of per-user tools (once: adding the same source again is a no-op)."""
    with _REGISTRY_LOCK:
        if all(type(known) is not type(source) for known in _SOURCES):
            _SOURCES.append(source)


def _source_of(name: str) -> ToolSource | None:
    return next((source for source in list(_SOURCES) if source.claims(name)), None)


def tool_get(*, name: str, user: "User | None" = None) -> Tool | None:
    """A registered tool, or (with the user calling) a source's tool by that name."""
    entry = _REGISTRY.get(name)
    if entry is not None or user is None:
        return entry
    source = _source_of(name)
    return source.tool_called(name=name, user=user) if source is not None else None


def tool_names() -> list[str]:
    """Every registered tool's name, in registry order."""
    return list(_REGISTRY)


def _describe(entry: Tool) -> dict[str, Any]:
    return {"name": entry.name, "description": entry.description, "parameters": entry.parameters}


def _sourced(names: list[str], user: "User | None") -> list[Tool]:
    """The enabled tools `user` may use that sources provide, in the order enabled."""
    if user is None:
        return []
    found: list[Tool] = []
    for source in list(_SOURCES):
        mine = [name for name in names if name not in _REGISTRY and source.claims(name)]
        if mine:
            found += source.tools_named(names=mine, user=user)
    return found


def tool_definitions(names: list[str], *, user: "User | None" = None) -> list[dict[str, Any]]:
    """OpenAI function-tool definitions for the enabled tools that exist, the registered
    ones in registry order, then those of sources `user` may use."""
    enabled = set(names)
    found = [entry for entry in list(_REGISTRY.values()) if entry.name in enabled]
    found += _sourced(names, user)
    return [{"type": "function", "function": _describe(entry)} for entry in found]


def tool_catalog(*, user: "User | None" = None) -> list[dict[str, Any]]:
    """Every registered tool, then (for `user`) the sources' tools they may enable, for
    GET /api/v1/tools/."""
    entries = list(_REGISTRY.values())
    if user is not None:
        entries += [entry for source in list(_SOURCES) for entry in source.tools_for(user=user)]
    return [
        {**_describe(entry), "mutating": entry.mutating, "server": entry.server or None}
        for entry in entries
    ]


def tool_default_names() -> list[str]:
    """The tools a new conversation enables: the built-ins, in the order they registered."""
    return [entry.name for entry in list(_REGISTRY.values()) if entry.enabled_by_default]


def tool_names_problems(
    value: Any, *, path: str = "$.tools", user: "User | None" = None
) -> list[Problem]:
    """What is wrong with a conversation's list of enabled tools (unknown names, repeats):
    a source's tool must be one `user`, the conversation's owner, may use."""
    registered = [entry.name for entry in list(_REGISTRY.values())]
    if not isinstance(value, list):
        return [Problem(path, f"must be a list of tool names, not {type_name(value)}")]
    problems = []
    seen: set[str] = set()
    for index, name in enumerate(value):
        item_path = f"{path}[{index}]"
        if not isinstance(name, str):
            problems.append(Problem(item_path, f"must be a string, not {type_name(name)}"))
        elif name not in registered and (source := _source_of(name)) is not None:
            if (problem := source.name_problem(name=name, user=user)) is not None:
                problems.append(Problem(item_path, problem))
            elif name in seen:
                problems.append(Problem(item_path, f"tool {name!r} is listed twice"))
            seen.add(name)
        elif name not in registered:
            known = ", ".join(registered)
            problems.append(Problem(item_path, f"unknown tool {name!r}; known tools: {known}"))
        elif name in seen:
            problems.append(Problem(item_path, f"tool {name!r} is listed twice"))
        else:
            seen.add(name)
    return problems
