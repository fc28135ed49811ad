"""Request ids for HTTP requests and websocket connections.

Each gets one: the caller's own `X-Request-ID` when it is short and plain (a proxy's or a
client's, so that their logs and ours can be matched), a new one otherwise. An HTTP answer
returns it in `X-Request-ID`. Every line logged meanwhile carries it, with the user, the
conversation and the run where known (config/log_context.py), and so do a worker's lines
for the run a request starts.
"""

from collections.abc import Awaitable, Callable
from contextvars import Token
from typing import Any

from asgiref.sync import iscoroutinefunction
from django.http import HttpRequest
from django.http.response import HttpResponseBase
from django.utils.decorators import sync_and_async_middleware

from config.log_context import (
    REQUEST_ID_HEADER,
    REQUEST_META_KEY,
    log_ids_bind,
    log_ids_bound,
    log_ids_reset,
    request_id_clean,
    request_id_new,
    request_log_ids,
    user_log_id,
)

Scope = dict[str, Any]
AsgiApp = Callable[[Scope, Any, Any], Awaitable[None]]


@sync_and_async_middleware
def request_id_middleware(get_response: Callable[[HttpRequest], Any]) -> Any:
    """First in MIDDLEWARE, so that every answer has the header, redirects and static
    files included."""
    if iscoroutinefunction(get_response):

        async def middleware(request: HttpRequest) -> HttpResponseBase:
            token = _begin(request)
            try:
                response = await get_response(request)
            finally:
                log_ids_reset(token)
            return _answered(request, response)

        return middleware

    def sync_middleware(request: HttpRequest) -> HttpResponseBase:
        token = _begin(request)
        try:
            response = get_response(request)
        finally:
            log_ids_reset(token)
        return _answered(request, response)

    return sync_middleware


def _begin(request: HttpRequest) -> Token[Any]:
    offered = request.headers.get(REQUEST_ID_HEADER)
    request.META[REQUEST_META_KEY] = request_id_clean(offered) or request_id_new()
    return log_ids_bind(**request_log_ids(request))


def _answered(request: HttpRequest, response: HttpResponseBase) -> HttpResponseBase:
    response[REQUEST_ID_HEADER] = request.META[REQUEST_META_KEY]
    return response


def websocket_log_ids(inner: AsgiApp) -> Any:  # an ASGI app, routed where Django types views
    """Wraps the conversation socket's consumer (config/asgi.py), which runs in one task
    per connection: every line logged while the connection is open, by the consumer and
    the tasks it starts, names the connection's request id (the handshake's X-Request-ID
    or a new one), its user and its conversation; so do the worker's lines for the runs
    it starts. (Daphne sends no headers with its handshake answer: the id is not returned.)
    """

    async def with_log_ids(scope: Scope, receive: Any, send: Any) -> None:
        headers = {bytes(name).lower(): bytes(value) for name, value in scope.get("headers", [])}
        offered = headers.get(REQUEST_ID_HEADER.lower().encode(), b"").decode("latin-1")
        with log_ids_bound(
            request_id=request_id_clean(offered) or request_id_new(),
            user_id=user_log_id(scope.get("user")),  # authenticated by the outer middleware
            conversation_id=scope.get("url_route", {}).get("kwargs", {}).get("conversation_id"),
        ):
            await inner(scope, receive, send)

    return with_log_ids
