"""Every error of /openai/v1/ in OpenAI's shape and with its status codes:
`{"error": {"message", "type", "param", "code"}}`.

The SDKs pick their exception class from the status (400 BadRequestError, 401
AuthenticationError, 404 NotFoundError, 409 ConflictError, 429 RateLimitError, ...) and
retry 409, 429 and 5xx unless the answer says `x-should-retry: false`: a conflict with the
conversation's state or a quota used up does not go away by retrying at once, so those
say so. A throttled request does, after `Retry-After`.
"""

import logging
import math
from typing import Any

from django.core.exceptions import ObjectDoesNotExist, RequestDataTooBig
from django.http import Http404, HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from rest_framework import exceptions
from rest_framework.response import Response

from config.log_context import exception_for_log
from conversations.errors import Conflict, QuotaExceeded, ValidationFailed

log = logging.getLogger(__name__)

INVALID_REQUEST = "invalid_request_error"
SHOULD_RETRY = "x-should-retry"
# An id or a path quoted back in a message is cut to this many characters.
QUOTE_MAX = 100


class OpenAIError(Exception):
    """An answer in OpenAI's error shape, raised by the views and their helpers."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        type: str = INVALID_REQUEST,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.type = type
        self.headers = headers or {}


def quoted(value: Any) -> str:
    text = str(value)
    return text if len(text) <= QUOTE_MAX else text[: QUOTE_MAX - 1] + "…"


def invalid(message: str, *, param: str | None, code: str = "invalid_value") -> OpenAIError:
    return OpenAIError(400, message, param=param, code=code)


def not_found(message: str) -> OpenAIError:
    return OpenAIError(404, message, code="not_found")


def error_body(
    message: str, *, type: str = INVALID_REQUEST, param: str | None = None, code: str | None = None
) -> dict[str, Any]:
    return {"error": {"message": message, "type": type, "param": param, "code": code}}


def error_response(error: OpenAIError) -> Response:
    response = Response(
        error_body(error.message, type=error.type, param=error.param, code=error.code),
        status=error.status,
    )
    for name, value in error.headers.items():
        response[name] = value
    return response


def param_of(path: str) -> str | None:
    """A domain problem's JSON path (`$.metadata.k`) as OpenAI names a parameter
    (`metadata.k`); None for the body as a whole."""
    if path in ("", "$"):
        return None
    return path.removeprefix("$.").removeprefix("$")


def _translated(exc: Exception, request: Any) -> OpenAIError | None:
    """The OpenAI error for a domain or framework exception; None for a bug."""
    if isinstance(exc, OpenAIError):
        return exc
    if isinstance(exc, ValidationFailed):
        first = exc.problems[0] if exc.problems else None
        message = f"Invalid value for '{param_of(first.path)}': {first.message}." if first else ""
        more = len(exc.problems) - 1
        if more > 0:
            message += f" ({more} more problem{'s' if more > 1 else ''} in this request.)"
        return invalid(
            message or "Invalid request.",
            param=param_of(first.path) if first else None,
            code="invalid_json" if exc.code == "invalid_json" else "invalid_value",
        )
    if isinstance(exc, Http404 | ObjectDoesNotExist | exceptions.NotFound):
        return not_found("Not found.")
    if isinstance(exc, Conflict):
        return OpenAIError(409, str(exc), code="conflict", headers={SHOULD_RETRY: "false"})
    if isinstance(exc, QuotaExceeded):
        # Used up until an owner deletes something or the day turns: retrying now is futile.
        return OpenAIError(
            429,
            exc.message,
            code=exc.code,
            type="insufficient_quota",
            headers={SHOULD_RETRY: "false"},
        )
    if isinstance(exc, RequestDataTooBig):
        return OpenAIError(413, "The request body is too large.", code="request_too_large")
    if isinstance(exc, exceptions.Throttled):
        raw_wait = getattr(exc, "wait", None)
        wait = math.ceil(raw_wait) if raw_wait is not None else None
        message = "Rate limit reached for requests; slow down."
        headers = {}
        if wait is not None:
            message += f" Retry in {wait} seconds."
            headers["Retry-After"] = str(wait)
        return OpenAIError(
            429, message, code="rate_limit_exceeded", type="requests", headers=headers
        )
    if isinstance(exc, exceptions.NotAuthenticated):
        return OpenAIError(
            401,
            "You didn't provide an API key. Send a Parley API key as "
            "'Authorization: Bearer <key>'.",
            code="missing_api_key",
        )
    if isinstance(exc, exceptions.AuthenticationFailed):
        return OpenAIError(401, f"{exc.detail} Create a key in Parley.", code="invalid_api_key")
    if isinstance(exc, exceptions.MethodNotAllowed):
        return OpenAIError(
            405,
            f"Invalid method for URL ({request.method} {quoted(request.path)}).",
            code="method_not_allowed",
        )
    if isinstance(exc, exceptions.APIException):
        return OpenAIError(exc.status_code, str(exc.detail), code=str(exc.default_code))
    return None


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response:
    """DRF's hook for the views of this API (OpenAIView.get_exception_handler)."""
    request = context.get("request")
    error = _translated(exc, request)
    if error is None:
        # A bug: logged with its traceback (its message only with PARLEY_LOG_CONTENT, as a
        # database error quotes the row it refused) and answered in the same shape.
        view = context.get("view").__class__.__name__
        log.error("unhandled error in %s", view, exc_info=exception_for_log(exc))
        error = OpenAIError(
            500, "The server had an error processing your request.", type="server_error"
        )
    response = error_response(error)
    auth_header = getattr(exc, "auth_header", None)
    if auth_header and error.status == 401:
        response["WWW-Authenticate"] = auth_header
    return response


# Exempt: it changes nothing, and a POST to a path that does not exist is a 404, not a
# refused CSRF token.
@csrf_exempt
def unknown_url(request: HttpRequest, *args: Any, **kwargs: Any) -> JsonResponse:
    """Any path under /openai/v1/ that matches no endpoint, whoever asks."""
    return JsonResponse(
        error_body(f"Invalid URL ({request.method} {quoted(request.path)}).", code="unknown_url"),
        status=404,
    )
