"""Every API error is JSON: `{"error": {"code", "message", "details"?}}`.

`exception_handler` is DRF's hook (settings.REST_FRAMEWORK); `not_found` and `server_error`
answer for /api/ paths that no view handles, so a client never has to parse HTML.
"""

import logging
import math
from collections.abc import Callable, Iterable
from functools import wraps
from typing import Any

from django.core.exceptions import ObjectDoesNotExist, RequestDataTooBig
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.http.response import HttpResponseBase
from django.views import csrf, defaults
from django.views.decorators.csrf import csrf_exempt
from rest_framework import exceptions, status
from rest_framework.response import Response

from config.log_context import exception_for_log
from conversations.errors import Conflict, Problem, QuotaExceeded, ValidationFailed

log = logging.getLogger(__name__)


class ApiError(exceptions.APIException):
    """An error with our own code and optional details, raised by views."""

    def __init__(
        self, status_code: int, code: str, message: str, details: dict[str, Any] | None = None
    ) -> None:
        super().__init__(message, code)
        self.status_code = status_code
        self.error_code = code
        self.details = details


def error_body(code: str, message: str, details: dict[str, Any] | None = None) -> dict[str, Any]:
    error: dict[str, Any] = {"code": code, "message": message}
    if details:
        error["details"] = details
    return {"error": error}


def problems_details(problems: list[Problem]) -> dict[str, Any]:
    return {"problems": [{"path": p.path, "message": p.message} for p in problems]}


def drf_problems(detail: Any, path: str = "$") -> list[Problem]:
    """DRF's nested error detail as a flat list of problems with JSON paths."""
    if isinstance(detail, dict):
        found = []
        for key, value in detail.items():
            sub = path if key == "non_field_errors" else f"{path}.{key}"
            found += drf_problems(value, sub)
        return found
    if isinstance(detail, list):
        if all(isinstance(item, str) for item in detail):
            return [Problem(path, str(item)) for item in detail]
        found = []
        for index, item in enumerate(detail):
            found += drf_problems(item, f"{path}[{index}]")
        return found
    return [Problem(path, str(detail))]


def _invalid(problems: list[Problem], code: str = "invalid") -> Response:
    first = problems[0] if problems else None
    message = f"Invalid request: {first}." if first else "Invalid request."
    if len(problems) > 1:
        message = f"Invalid request: {first} (and {len(problems) - 1} more)."
    return Response(error_body(code, message, problems_details(problems)), status=400)


_DRF_CODES = {
    exceptions.NotAuthenticated: "not_authenticated",
    exceptions.AuthenticationFailed: "authentication_failed",
    exceptions.PermissionDenied: "permission_denied",
    exceptions.MethodNotAllowed: "method_not_allowed",
    exceptions.ParseError: "parse_error",
    exceptions.UnsupportedMediaType: "unsupported_media_type",
    exceptions.NotAcceptable: "not_acceptable",
    exceptions.NotFound: "not_found",
}


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response:
    if isinstance(exc, ApiError):
        return Response(error_body(exc.error_code, str(exc.detail), exc.details), exc.status_code)
    if isinstance(exc, ValidationFailed):
        return _invalid(exc.problems, exc.code)
    if isinstance(exc, exceptions.ValidationError):
        return _invalid(drf_problems(exc.detail))
    if isinstance(exc, Http404 | ObjectDoesNotExist):
        return Response(error_body("not_found", "Not found."), status=404)
    if isinstance(exc, Conflict):
        return Response(error_body("conflict", str(exc)), status=409)
    if isinstance(exc, QuotaExceeded):
        return Response(error_body(exc.code, exc.message), status=429)
    if isinstance(exc, RequestDataTooBig):
        return Response(
            error_body("request_too_large", "The request body is too large."), status=413
        )
    if isinstance(exc, exceptions.Throttled):
        raw_wait = getattr(exc, "wait", None)
        wait = math.ceil(raw_wait) if raw_wait is not None else None
        message = "Too many requests; slow down." + (
            f" Retry in {wait} seconds." if wait is not None else ""
        )
        if exc.get_codes() == "login_locked":  # the password cap says what is locked
            message = str(exc.detail)
        response = Response(
            error_body("throttled", message, {"retry_after": wait} if wait is not None else None),
            status=429,
        )
        if wait is not None:
            response["Retry-After"] = str(wait)
        return response
    if isinstance(exc, exceptions.APIException):
        code = next(
            (name for cls, name in _DRF_CODES.items() if isinstance(exc, cls)),
            str(exc.default_code),
        )
        response = Response(error_body(code, _message(exc.detail)), status=exc.status_code)
        auth_header = getattr(exc, "auth_header", None)
        if auth_header:
            response["WWW-Authenticate"] = auth_header
        return response
    # A bug: log it with its traceback (its message only with PARLEY_LOG_CONTENT: a database
    # error quotes the row it refused) and answer in the API's shape, never with HTML.
    view = context.get("view").__class__.__name__
    log.error("unhandled error in %s", view, exc_info=exception_for_log(exc))
    return Response(error_body("server_error", "Internal server error."), status=500)


def _message(detail: Any) -> str:
    if isinstance(detail, list | dict):
        return "; ".join(str(p) for p in drf_problems(detail))
    return str(detail)


# Exempt: it changes nothing, and a POST to a path that does not exist is a 404, not the
# refusal of a CSRF token.
@csrf_exempt
def api_not_found(request: HttpRequest, *args: Any, **kwargs: Any) -> JsonResponse:
    """Any /api/ path that matches no endpoint."""
    return JsonResponse(error_body("not_found", "No such endpoint."), status=404)


def method_not_allowed(method: str, allowed: Iterable[str]) -> JsonResponse:
    allow = ", ".join(allowed)
    response = JsonResponse(
        error_body("method_not_allowed", f"Method {method} not allowed; use {allow}."),
        status=405,
    )
    response["Allow"] = allow
    return response


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
        return JsonResponse(error_body("permission_denied", f"CSRF Failed: {reason}"), status=403)
    return csrf.csrf_failure(request, reason=reason)


def not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    if request.path.startswith("/api/"):
        return JsonResponse(error_body("not_found", "Not found."), status=404)
    return defaults.page_not_found(request, exception)


def bad_request(request: HttpRequest, exception: Exception) -> HttpResponse:
    if request.path.startswith("/api/"):
        return JsonResponse(error_body("bad_request", "Bad request."), status=400)
    return defaults.bad_request(request, exception)


def server_error(request: HttpRequest) -> HttpResponse:
    if request.path.startswith("/api/"):
        return JsonResponse(
            error_body("server_error", "Internal server error."),
            status=status.HTTP_500_INTERNAL_SERVER_ERROR,
        )
    return defaults.server_error(request)
