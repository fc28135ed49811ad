"""What a log line says about the work it belongs to, and what it leaves out.

A context variable holds the ids of the work in hand: the request id of an HTTP request or
a websocket connection (config/request_id.py), the user, the conversation and the run. The
filter below copies them onto every record, so any `log.warning(...)`, in the engine, a
tool or Django itself, can be found by request, user, conversation or run in JSON logs
(LOG_FORMAT=json). A run's steps carry the request id of the request that started the run:
the engine sends it in each step's task headers (`task_headers`), and the worker binds it
again for the step (`task_request_id`), so the next step it enqueues carries it too.

Messages are people's private words. Unless PARLEY_LOG_CONTENT is on, an exception's message
is left out of the logs (`exception_for_log`): a database error quotes the row it refused,
a tool's error whatever it was given. Its type and traceback are kept.

Imports nothing of the project's: any layer may use it.
"""

import functools
import logging
import re
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar, Token
from types import MappingProxyType
from typing import Any, ParamSpec, TypeVar

from django.conf import settings
from django.db import InterfaceError, OperationalError
from django.http import HttpRequest
from django.utils.functional import LazyObject, empty
from pythonjsonlogger.json import JsonFormatter
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

LOG_IDS = ("request_id", "user_id", "conversation_id", "run_id")
REQUEST_ID_HEADER = "X-Request-ID"
# Where a request keeps its id, for Django's own lines about it (logged after it is done).
REQUEST_META_KEY = "parley.request_id"
# The header of a step's task message that carries the request id to the worker.
TASK_REQUEST_ID_HEADER = "parley_request_id"
# A caller's own id is kept only when short and plain, so that it can neither break a line
# nor pass for another field; anything else is replaced with a new id.
_REQUEST_ID = re.compile(r"[A-Za-z0-9._:-]{1,64}")

# An id, or how to find it when a line is logged (a request's user, once authenticated).
IdValue = str | Callable[[], str | None]
_NO_IDS: Mapping[str, IdValue] = MappingProxyType({})
_ids: ContextVar[Mapping[str, IdValue]] = ContextVar("parley_log_ids", default=_NO_IDS)

P = ParamSpec("P")
R = TypeVar("R")


def request_id_new() -> str:
    return uuid.uuid4().hex


def request_id_clean(value: object) -> str | None:
    """`value` when it is a request id to keep as it is, else None."""
    return value if isinstance(value, str) and _REQUEST_ID.fullmatch(value) else None


# --- the ids of the work in hand ------------------------------------------------------------


def log_ids_bind(**ids: object) -> Token[Mapping[str, IdValue]]:
    """Add ids (or ways to find them) to the current context's; None removes one. Returns
    the token `log_ids_reset` takes to restore the ids as they were."""
    current = dict(_ids.get())
    for name, value in ids.items():
        if name not in LOG_IDS:
            raise TypeError(f"not a log id: {name!r}")
        if value is None:
            current.pop(name, None)
        else:
            current[name] = value if callable(value) else str(value)
    return _ids.set(MappingProxyType(current))


def log_ids_reset(token: Token[Mapping[str, IdValue]]) -> None:
    _ids.reset(token)


@contextmanager
def log_ids_bound(**ids: object) -> Iterator[None]:
    token = log_ids_bind(**ids)
    try:
        yield
    finally:
        _ids.reset(token)


def log_ids_scoped(func: Callable[P, R]) -> Callable[P, R]:
    """Ids bound while `func` runs end with it."""

    @functools.wraps(func)
    def scoped(*args: P.args, **kwargs: P.kwargs) -> R:
        token = _ids.set(_ids.get())
        try:
            return func(*args, **kwargs)
        finally:
            _ids.reset(token)

    return scoped


def log_id(name: str) -> str | None:
    return _resolved(_ids.get().get(name))


def request_log_ids(request: HttpRequest) -> dict[str, IdValue | None]:
    """An HTTP request's ids: its own, and its user, conversation and run once known
    (looked up when a line is logged; never a database query)."""
    return {
        "request_id": request.META.get(REQUEST_META_KEY),
        "user_id": lambda: user_log_id(request.__dict__.get("user")),
        "conversation_id": lambda: _url_id(request, "conversation_id"),
        "run_id": lambda: _url_id(request, "run_id"),
    }


def user_log_id(user: Any) -> str | None:
    """The id of an authenticated user; None for anyone else, and for a lazy user not yet
    looked up (Django's session user before a view needs it)."""
    if isinstance(user, LazyObject):
        user = user.__dict__.get("_wrapped", empty)
    if user is None or user is empty or not getattr(user, "is_authenticated", False):
        return None
    return str(user.pk)


def _url_id(request: HttpRequest, name: str) -> str | None:
    match = request.resolver_match
    value = match.kwargs.get(name) if match is not None else None
    try:
        return str(uuid.UUID(str(value))) if value is not None else None
    except ValueError:  # a path that names no real id
        return None


# --- across the broker ------------------------------------------------------------------------


def task_headers() -> dict[str, str]:
    """Headers for a task sent now: the request id in hand, if any."""
    request_id = log_id("request_id")
    return {TASK_REQUEST_ID_HEADER: request_id} if request_id else {}


def task_request_id(request: Any) -> str | None:
    """The request id a task's message carries. A worker turns the message's headers into
    attributes of `task.request`; a task applied in the calling process keeps them under
    `headers`."""
    value = getattr(request, TASK_REQUEST_ID_HEADER, None)
    if value is None:
        value = (getattr(request, "headers", None) or {}).get(TASK_REQUEST_ID_HEADER)
    return request_id_clean(value)


# --- what a line leaves out -----------------------------------------------------------------

# Errors about connections and time, whose messages never quote what people wrote and are
# what an operator needs to see: always logged whole.
_PLAIN_ERRORS = (
    ConnectionError,
    TimeoutError,
    RedisConnectionError,
    RedisTimeoutError,
    OperationalError,
    InterfaceError,
)


class MessageWithheld(Exception):
    """Stands in for an exception whose message is not logged."""


def exception_for_log(error: BaseException, *, by_type: bool = True) -> BaseException:
    """`error` itself when message text may be logged, or when (`by_type`) it is one of the
    plain errors above; otherwise a stand-in with its type and traceback but no message (a
    tool's error passes by_type=False: it is made of what the tool was given)."""
    if isinstance(error, MessageWithheld) or settings.PARLEY_LOG_CONTENT:
        return error
    if by_type and isinstance(error, _PLAIN_ERRORS):
        return error
    kind = type(error)
    name = (
        kind.__qualname__
        if kind.__module__ == "builtins"
        else f"{kind.__module__}.{kind.__qualname__}"
    )
    stand_in = MessageWithheld(f"{name} (its message is not logged: PARLEY_LOG_CONTENT is off)")
    return stand_in.with_traceback(error.__traceback__)


# --- the handler's filters and the JSON lines format ---------------------------------------


class LogIdsFilter(logging.Filter):
    """Puts the ids of the work in hand on each record (`record.request_id`, ...)."""

    def filter(self, record: logging.LogRecord) -> bool:
        ids: Mapping[str, IdValue | None] = _ids.get()
        request = getattr(record, "request", None)
        if "request_id" not in ids and isinstance(request, HttpRequest):
            # Django's lines about a request's answer are logged once it has been handled.
            ids = request_log_ids(request)
        for name in LOG_IDS:
            if getattr(record, name, None) is None:  # one passed in `extra` wins
                setattr(record, name, _resolved(ids.get(name)))
        return True


def _resolved(value: IdValue | None) -> str | None:
    if not callable(value):
        return value
    try:
        return value()
    except Exception:  # a line is never lost, nor its caller failed, for want of an id
        return None


class ContentGuardFilter(logging.Filter):
    """Leaves exception messages out of every record, Django's, Celery's and Daphne's
    included, as `exception_for_log` says: the exception a record carries, and one among
    its arguments (`log.error("failed: %s", error)`)."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if error is not None:
            shown = exception_for_log(error)
            if shown is not error:
                record.exc_info = (type(shown), shown, shown.__traceback__)
                record.exc_text = None  # a handler before may have kept the whole text
        if isinstance(record.args, tuple) and any(
            isinstance(arg, BaseException) for arg in record.args
        ):
            record.args = tuple(
                exception_for_log(arg) if isinstance(arg, BaseException) else arg
                for arg in record.args
            )
        return True


class JsonLinesFormatter(JsonFormatter):
    """One JSON object per line: time (UTC, ISO 8601), level, logger, message, the ids
    known, and the exception's traceback when there is one. Nothing else a record carries
    is written (Django attaches the request, query string and all)."""

    FIELDS = ("time", "level", "logger", "message", *LOG_IDS, "exception", "stack")

    def __init__(self) -> None:
        super().__init__(
            ["levelname", "name", "message", *LOG_IDS],
            rename_fields={
                "levelname": "level",
                "name": "logger",
                "exc_info": "exception",
                "stack_info": "stack",
            },
            timestamp="time",
        )

    def process_log_record(self, log_data: dict[str, Any]) -> dict[str, Any]:
        return {key: log_data[key] for key in self.FIELDS if log_data.get(key) is not None}
