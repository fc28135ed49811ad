"""Running a tool call: `tool_execute` never raises. Unknown or disabled tools, bad
argument JSON, arguments that fail validation, a tool that raises and a tool that overruns
its time limit all become an error `ToolResult` the model can read and act on.

Time limits: the tool runs in a daemon worker thread (with its own database connection,
closed when it returns) and the caller stops waiting at the deadline. Python cannot kill a
thread, so an abandoned tool runs on until it returns: tools must be written to finish
(bounded work, timeouts on any I/O). Inside the caller's transaction a tool runs inline
instead (see `_must_run_inline`), where no deadline can be enforced.

A tool server's tools (tools/servers.py) run here too, looked up with the calling user:
a call a crash may have cut short is sent again only when the tool is `resendable`,
otherwise its result is the `interrupted` error.

A stop: the caller's `stopped` is asked every `stop_every` seconds while the tool runs.
Once it says yes, the call's `ToolContext.stop` is set (a tool server's call is cancelled
and its connection closed), the tool is given a moment to wind down, and the result is
the `cancelled` error (`ToolResult.cancelled`), whatever the tool does afterwards.
"""

import contextvars
import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import pydantic
from django.conf import settings
from django.db import connections, transaction
from pydantic_core import to_jsonable_python

from config.log_context import exception_for_log
from conversations import metrics
from conversations.json_input import JsonInputError, json_parse_repaired
from conversations.tools.registry import (
    Emit,
    Tool,
    ToolContext,
    ToolError,
    ToolOutput,
    ToolResult,
    tool_get,
    tool_names,
)
from conversations.validation import storable_text, type_name

logger = logging.getLogger(__name__)

INTERRUPTED = "interrupted: the call may or may not have run"
# How often a stop is looked for while a tool runs, and how long a stopped tool is given
# to wind down (a tool server's call closes its connection) before its result is kept.
STOP_EVERY_SECONDS = 0.5
STOP_GRACE_SECONDS = 2.0


def _error(message: str) -> ToolResult:
    return ToolResult(output=_clean(message), is_error=True)


def _counted(
    tool: str, outcome: str, result: ToolResult, *, server: str = "", seconds: float | None = None
) -> ToolResult:
    """`result`, counted for /metrics by tool and outcome (ok, error, timeout, refused),
    and a tool server's calls by server besides."""
    metrics.tool_called(tool=tool, outcome=outcome)
    if server:
        metrics.tool_server_called(server=server, outcome=outcome, seconds=seconds)
    return result


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
    # The caller's stop was seen while the tool ran.
    stopped: bool = False


@dataclass(frozen=True)
class _Watch:
    """What the wait on a tool looks after: the caller's lease and its stop."""

    keepalive: Callable[[], None] | None
    keepalive_every: float
    stopped: Callable[[], bool] | None
    stop_every: float

    def next_wait(self, left: float, *, since_keepalive: float) -> float:
        wait = left
        if self.keepalive is not None:
            wait = min(wait, max(0.0, self.keepalive_every - since_keepalive))
        if self.stopped is not None:
            wait = min(wait, self.stop_every)
        return wait


def _run_in_thread(
    call: Callable[[], Any], *, thread_name: str, timeout: float, watch: _Watch
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

    # With the caller's context: the tool's own lines name the run and request it serves.
    in_context = contextvars.copy_context().run
    threading.Thread(target=in_context, args=(work,), name=thread_name, daemon=True).start()
    deadline = time.monotonic() + timeout
    kept_alive = time.monotonic()
    while (left := deadline - time.monotonic()) > 0:
        since = time.monotonic() - kept_alive
        if outcome.finished.wait(watch.next_wait(left, since_keepalive=since)):
            break
        if watch.stopped is not None and watch.stopped():
            outcome.stopped = True
            break
        if watch.keepalive is not None and time.monotonic() - kept_alive >= watch.keepalive_every:
            watch.keepalive()  # may raise: the caller stops waiting, the tool runs on alone
            kept_alive = time.monotonic()
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
    stopped: Callable[[], bool] | None = None,
    stop_every: float = STOP_EVERY_SECONDS,
) -> ToolResult:
    """Validate and run one tool call; every failure becomes an error result.

    `keepalive` is called every `keepalive_every` seconds while the tool runs (the runner
    renews its lease on the run); what it raises ends the wait and is raised here, and the
    tool's events are then dropped. `stopped` is asked every `stop_every` seconds: once it
    says the run was stopped, the call is abandoned (its result says so).
    """
    entry = tool_get(name=name, user=context.user)
    if entry is None:
        # Counted as "unknown": the model may make up any number of names.
        message = f"Unknown tool {name!r}. Available tools: {_usable(enabled, context)}."
        return _counted("unknown", "refused", _error(message))
    if name not in enabled:
        usable = _usable(enabled, context)
        message = f"Tool {name!r} is not enabled for this conversation. Available tools: {usable}."
        return _counted(name, "refused", _error(message))
    server = entry.server

    try:
        # Some models send an empty string for a call without arguments. Deep nesting and
        # NaN are refused like a client's; unstorable text is repaired, so a tool never
        # receives a string the database would refuse.
        raw = json_parse_repaired(arguments) if arguments.strip() else {}
    except (JsonInputError, TypeError, AttributeError) as exc:
        message = f"Invalid JSON in the arguments for {name}: {exc}. Send a JSON object."
        return _counted(name, "refused", _error(message), server=server)
    if not isinstance(raw, dict):
        message = f"The arguments for {name} must be a JSON object, not {type_name(raw)}."
        return _counted(name, "refused", _error(message), server=server)
    try:
        parsed = entry.arguments.model_validate(raw)
    except pydantic.ValidationError as exc:
        message = f"Invalid arguments for {name}: {_describe_validation(exc)}"
        return _counted(name, "refused", _error(message), server=server)
    # Attributes, not model_dump(): keeps validated values (nested models) as they are.
    # A tool server's tool takes any object (its server checks it): the extra keys.
    kwargs = {key: getattr(parsed, key) for key in type(parsed).model_fields}
    kwargs.update(parsed.model_extra or {})
    if context.is_resume and not entry.resendable:
        # An earlier attempt may have sent it before dying: sending it again could do
        # twice what the tool does, so the model is told instead.
        return _counted(name, "error", _error(f"{name} failed: {INTERRUPTED}"), server=server)

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

    stop = threading.Event()

    def call() -> Any:
        return entry.function(replace(context, emit=collect, stop=stop), **kwargs)

    timeout = entry.timeout if entry.timeout is not None else settings.PARLEY_TOOL_TIMEOUT_SECONDS
    started = time.monotonic()
    if _must_run_inline():
        outcome = _run_inline(call)
    else:
        watch = _Watch(keepalive, keepalive_every, stopped, stop_every)
        outcome = _run_in_thread(
            call, thread_name=f"tool-{name}-{context.call_id}", timeout=timeout, watch=watch
        )
        if outcome.stopped:
            stop.set()
            outcome.finished.wait(STOP_GRACE_SECONDS)
    # Read once: a tool that finishes from here on is treated as timed out, consistently.
    finished = outcome.finished.is_set()
    seconds = time.monotonic() - started
    with lock:
        listening.clear()  # an abandoned tool's later events are dropped
    _forward(events, emit=context.emit)
    if outcome.stopped:
        return _cancelled(entry, seconds=seconds)
    return _result(entry, outcome, context, finished=finished, timeout=timeout, seconds=seconds)


def _result(
    entry: Tool,
    outcome: _Outcome,
    context: ToolContext,
    *,
    finished: bool,
    timeout: float,
    seconds: float,
) -> ToolResult:
    name, server = entry.name, entry.server
    if not finished:
        logger.warning("tool %s (call %s) overran %ss", name, context.call_id, timeout)
        still = " Its effect may still take place." if entry.mutating else ""
        message = (
            f"{name} timed out: it did not finish within {timeout:g} seconds.{still} "
            "Try a smaller request or a different approach."
        )
        return _counted(name, "timeout", _error(message), server=server, seconds=seconds)
    if outcome.error is not None:
        message = _failure_message(name, outcome.error)
        return _counted(name, "error", _error(message), server=server, seconds=seconds)
    try:
        value = outcome.value
        if isinstance(value, ToolOutput):
            result = ToolResult(output=_clean(value.text), is_error=False, images=value.images)
        else:
            result = ToolResult(output=_clean(_render(value)), is_error=False)
        return _counted(name, "ok", result, server=server, seconds=seconds)
    except (TypeError, ValueError) as exc:
        message = f"{name} failed: it returned a value that is not JSON ({exc})."
        return _counted(name, "error", _error(message), server=server, seconds=seconds)


def _cancelled(entry: Tool, *, seconds: float) -> ToolResult:
    still = " Its effect may still take place." if entry.mutating else ""
    message = f"{entry.name} was cancelled: the run was stopped while it ran.{still}"
    result = ToolResult(output=_clean(message), is_error=True, cancelled=True)
    return _counted(entry.name, "cancelled", result, server=entry.server, seconds=seconds)


def _usable(enabled: list[str], context: ToolContext) -> str:
    """The enabled tools that exist for the caller, to name in a refusal."""
    registered = [n for n in tool_names() if n in set(enabled)]
    others = [
        n
        for n in enabled
        if n not in registered and tool_get(name=n, user=context.user) is not None
    ]
    return ", ".join(registered + others) or "none"


def _failure_message(name: str, error: BaseException) -> str:
    if isinstance(error, ToolError):
        return f"{name} failed: {error}"
    # Its message is made of what the tool was given, so only with PARLEY_LOG_CONTENT.
    logger.warning("tool %s raised", name, exc_info=exception_for_log(error, by_type=False))
    return f"{name} failed: {type(error).__name__}: {error}"


def _forward(events: list[tuple[str, dict[str, Any]]], *, emit: Emit) -> None:
    for event_type, payload in events:
        try:
            emit(event_type, payload)
        except Exception:
            # Publishing is best effort; the tool's result must still reach the model.
            logger.exception("could not publish %s from a tool", event_type)
