"""The REST door's rendering of the error vocabulary (conversations.errors): every API
error is JSON `{"error": {"code", "message", "details"?}}` with the code's own status.

`exception_handler` is DRF's hook (settings.REST_FRAMEWORK); `not_found` and `server_error`
answer for /api/ paths that no view handles, so a client never has to parse HTML.
"""

import logging
from collections.abc import Callable, Iterable
from functools import wraps
from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.http.response import HttpResponseBase
from django.views import csrf, defaults
from django.views.decorators.csrf import csrf_exempt
from rest_framework.response import Response

from config.log_context import exception_for_log
from conversations.errors import (
    BAD_REQUEST,
    METHOD_NOT_ALLOWED,
    NOT_FOUND,
    PERMISSION_DENIED,
    SERVER_ERROR,
    UNKNOWN_URL,
    ParleyError,
    Throttled,
    error_from,
)

log = logging.getLogger(__name__)


def error_body(error: ParleyError) -> dict[str, Any]:
    body: dict[str, Any] = {"code": error.code, "message": error.message}
    if error.details:
        body["details"] = error.details
    return {"error": body}


def error_headers(error: ParleyError, *, auth_header: str | None = None) -> dict[str, str]:
    """Retry-After on a spent budget; WWW-Authenticate on every 401, naming the scheme the
    refused authentication asked for (an API key unless told otherwise)."""
    headers = {}
    if isinstance(error, Throttled) and error.wait is not None:
        headers["Retry-After"] = str(error.wait)
    if error.status == 401:
        headers["WWW-Authenticate"] = auth_header or "Bearer"
    return headers


def error_response(error: ParleyError, *, auth_header: str | None = None) -> Response:
    """The answer of a DRF view."""
    return Response(
        error_body(error),
        status=error.status,
        headers=error_headers(error, auth_header=auth_header),
    )


def error_json(error: ParleyError, *, headers: dict[str, str] | None = None) -> JsonResponse:
    """The answer of a plain Django view under /api/."""
    return JsonResponse(
        error_body(error), status=error.status, headers={**error_headers(error), **(headers or {})}
    )


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response:
    error = error_from(exc)
    if error is not None:
        return error_response(error, auth_header=getattr(exc, "auth_header", None))
    # A bug: log it with its traceback (its message only with PARLEY_LOG_CONTENT: a database
    # error quotes the row it refused) and answer in the API's shape, never with HTML.
    view = context.get("view").__class__.__name__
    log.error("unhandled error in %s", view, exc_info=exception_for_log(exc))
    return error_response(ParleyError(SERVER_ERROR))


# Exempt: it changes nothing, and a POST to a path that does not exist is a 404, not the
# refusal of a CSRF token.
@csrf_exempt
def api_not_found(request: HttpRequest, *args: Any, **kwargs: Any) -> JsonResponse:
    """Any /api/ path that matches no endpoint."""
    return error_json(ParleyError(UNKNOWN_URL))


def method_not_allowed(method: str, allowed: Iterable[str]) -> JsonResponse:
    allow = ", ".join(allowed)
    message = f"Method {method} not allowed; use {allow}."
    return error_json(ParleyError(METHOD_NOT_ALLOWED, message), headers={"Allow": allow})


View = Callable[..., HttpResponseBase]


def read_only(view: View) -> View:
    """Only GET, HEAD and OPTIONS reach `view` (the schema and the API docs); any other
    method gets the API's JSON 405, whatever the page's own renderer would have said."""
    allowed = ("GET", "HEAD", "OPTIONS")

    @csrf_exempt
    @wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        if request.method not in allowed:
            return method_not_allowed(str(request.method), allowed)
        return view(request, *args, **kwargs)

    return wrapper


def csrf_failure(request: HttpRequest, reason: str = "") -> HttpResponse:
    """Django's CSRF refusal: JSON on /api/ paths, the site's page elsewhere."""
    if request.path.startswith("/api/"):
        # The code and wording of DRF's own CSRF refusal on the API's other endpoints.
        return error_json(ParleyError(PERMISSION_DENIED, f"CSRF Failed: {reason}"))
    return csrf.csrf_failure(request, reason=reason)


def not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    if request.path.startswith("/api/"):
        return error_json(ParleyError(NOT_FOUND))
    return defaults.page_not_found(request, exception)


def bad_request(request: HttpRequest, exception: Exception) -> HttpResponse:
    if request.path.startswith("/api/"):
        return error_json(ParleyError(BAD_REQUEST))
    return defaults.bad_request(request, exception)


def server_error(request: HttpRequest) -> HttpResponse:
    if request.path.startswith("/api/"):
        return error_json(ParleyError(SERVER_ERROR))
    return defaults.server_error(request)
