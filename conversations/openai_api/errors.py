"""The OpenAI-compatible door's rendering of the error vocabulary (conversations.errors):
`{"error": {"message", "type", "param", "code"}}` with OpenAI's status codes.

`OPENAI` is the one table from vocabulary code to OpenAI's status, type and code. The code
is the vocabulary's, except where OpenAI has its own for the condition (a run in flight
is OpenAI's 400 `conversation_locked`; a missing key `missing_api_key`, ...): that alias
is declared in the table and nowhere else. This door's own parameter checks may name a
finer OpenAI code for invalid input (`INVALID_REFINEMENTS`, e.g. `unknown_parameter`).

The SDKs pick their exception class from the status (400 BadRequestError, 401
AuthenticationError, 404 NotFoundError, 409 ConflictError, 429 RateLimitError, ...) and
retry 409, 429 and 5xx unless the answer says `x-should-retry: false`: a conflict with the
conversation's state or a quota used up does not go away by retrying at once, so those
say so. A throttled request does, after `Retry-After`.
"""

import logging
from dataclasses import dataclass
from typing import Any

from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from rest_framework.response import Response

from config.log_context import exception_for_log
from conversations import errors as codes
from conversations.errors import (
    ErrorCode,
    ParleyError,
    Throttled,
    ValidationFailed,
    error_from,
)
from conversations.validation import type_name

log = logging.getLogger(__name__)

INVALID_REQUEST = "invalid_request_error"
SERVER = "server_error"
SHOULD_RETRY = "x-should-retry"
# An id or a path quoted back in a message is cut to this many characters.
QUOTE_MAX = 100


@dataclass(frozen=True)
class OpenAIShape:
    status: int
    type: str = INVALID_REQUEST
    # OpenAI's own code for the condition; "" for the vocabulary's, None for none at all.
    alias: str | None = ""
    # False: `x-should-retry: false`, so the SDK does not retry what cannot succeed now.
    retry: bool = True
    # OpenAI's own wording, formatted with the error's `message` and the request's
    # `method` and `path`; None: the error's message.
    message: str | None = None


OPENAI: dict[ErrorCode, OpenAIShape] = {
    codes.INVALID: OpenAIShape(400, alias="invalid_value"),
    codes.INVALID_JSON: OpenAIShape(400),
    codes.INVALID_IMPORT: OpenAIShape(400),
    codes.REQUEST_TOO_LARGE: OpenAIShape(413),
    codes.BAD_REQUEST: OpenAIShape(400),
    codes.UNSUPPORTED_MEDIA_TYPE: OpenAIShape(415),
    codes.NOT_ACCEPTABLE: OpenAIShape(406),
    codes.NOT_AUTHENTICATED: OpenAIShape(
        401,
        alias="missing_api_key",
        message="You didn't provide an API key. Send a Parley API key as "
        "'Authorization: Bearer <key>'.",
    ),
    codes.AUTHENTICATION_FAILED: OpenAIShape(
        401, alias="invalid_api_key", message="{message} Create a key in Parley."
    ),
    codes.PERMISSION_DENIED: OpenAIShape(403),
    codes.INSUFFICIENT_SCOPE: OpenAIShape(403),
    codes.NOT_FOUND: OpenAIShape(404),
    codes.UNKNOWN_URL: OpenAIShape(404, message="Invalid URL ({method} {path})."),
    codes.METHOD_NOT_ALLOWED: OpenAIShape(405, message="Invalid method for URL ({method} {path})."),
    codes.THROTTLED: OpenAIShape(429, type="requests", alias="rate_limit_exceeded"),
    codes.CONVERSATION_QUOTA_EXCEEDED: OpenAIShape(429, type="insufficient_quota", retry=False),
    codes.MESSAGE_QUOTA_EXCEEDED: OpenAIShape(429, type="insufficient_quota", retry=False),
    codes.RUN_ACTIVE: OpenAIShape(400, alias="conversation_locked", retry=False),
    codes.NO_ACTIVE_RUN: OpenAIShape(409, retry=False),
    codes.DRAFT_EDITED_MEANWHILE: OpenAIShape(409, retry=False),
    # A stream asked of a response whose events are gone: retrieve it without `stream`.
    codes.EVENTS_EXPIRED: OpenAIShape(400, retry=False),
    codes.STREAM_UNAVAILABLE: OpenAIShape(503, type=SERVER),
    codes.IDEMPOTENCY_IN_FLIGHT: OpenAIShape(409),
    codes.IDEMPOTENCY_KEY_REUSED: OpenAIShape(422),
    codes.IDEMPOTENCY_ANSWER_NOT_KEPT: OpenAIShape(409, retry=False),
    codes.IDEMPOTENCY_ANSWER_GONE: OpenAIShape(410),
    codes.FILE_TOO_LARGE: OpenAIShape(413),
    codes.UNSUPPORTED_FILE_TYPE: OpenAIShape(415),
    codes.IMAGE_TOO_LARGE: OpenAIShape(400),
    codes.FILE_QUOTA_EXCEEDED: OpenAIShape(413),
    codes.FILE_IN_USE: OpenAIShape(409, retry=False),
    codes.MODEL_CALL_FAILED: OpenAIShape(502, type=SERVER),
    codes.SERVER_ERROR: OpenAIShape(
        500, type=SERVER, alias=None, message="The server had an error processing your request."
    ),
}

# OpenAI's finer codes for invalid input, named by this door's own parameter checks.
INVALID_REFINEMENTS = frozenset(
    {
        "invalid_type",
        "missing_required_parameter",
        "unknown_parameter",
        "empty_array",
        "array_above_max_length",
        "unsupported_value",
    }
)


class OpenAIError(ParleyError):
    """A refusal by this door's own checks: a vocabulary condition, with the parameter
    it concerns and, for invalid input, one of OpenAI's finer codes."""

    def __init__(
        self,
        error: ErrorCode,
        message: str,
        *,
        param: str | None = None,
        refinement: str | None = None,
    ) -> None:
        if refinement is not None and (
            error is not codes.INVALID or refinement not in INVALID_REFINEMENTS
        ):
            raise ValueError(f"{refinement!r} does not refine {error.code!r}")
        super().__init__(error, message)
        self.param = param
        self.refinement = refinement


def quoted(value: Any) -> str:
    text = str(value)
    return text if len(text) <= QUOTE_MAX else text[: QUOTE_MAX - 1] + "…"


def invalid(message: str, *, param: str | None, code: str | None = None) -> OpenAIError:
    return OpenAIError(codes.INVALID, message, param=param, refinement=code)


def wrong_type(param: str, expected: str, value: Any) -> OpenAIError:
    return invalid(
        f"Invalid type for '{param}': expected {expected}, but got {type_name(value)}.",
        param=param,
        code="invalid_type",
    )


def fields_check(item: dict[str, Any], param: str, *, required: set[str], known: set[str]) -> None:
    """An object of the input holds no field outside `known` and every one of `required`,
    each refusal naming the field as OpenAI's API does (`input[0].content[1].foo`)."""
    for name in item:
        if name not in known:
            full = f"{param}.{quoted(name)}"
            raise invalid(f"Unknown parameter: '{full}'.", param=full, code="unknown_parameter")
    for name in sorted(required):
        if name not in item:
            raise invalid(
                f"Missing required parameter: '{param}.{name}'.",
                param=f"{param}.{name}",
                code="missing_required_parameter",
            )


def param_of(path: str) -> str | None:
    """A domain problem's JSON path (`$.metadata.k`) as OpenAI names a parameter
    (`metadata.k`); None for the body as a whole."""
    if path in ("", "$"):
        return None
    return path.removeprefix("$.").removeprefix("$")


def _problems_message(error: ValidationFailed) -> tuple[str, str | None]:
    """The first problem in OpenAI's words, and the parameter it names."""
    if not error.problems:
        return error.message, None
    first = error.problems[0]
    param = param_of(first.path)
    message = (
        f"Invalid value for '{param}': {first.message}."
        if param is not None
        else f"Invalid request: {first.message}."
    )
    more = len(error.problems) - 1
    if more > 0:
        message += f" ({more} more problem{'s' if more > 1 else ''} in this request.)"
    return message, param


def error_body(error: ParleyError, request: Any = None) -> dict[str, Any]:
    shape = OPENAI[error.error]
    message, param = error.message, None
    if isinstance(error, OpenAIError):
        param = error.param
    elif isinstance(error, ValidationFailed):
        message, param = _problems_message(error)
    if shape.message is not None:
        method = getattr(request, "method", "") or ""
        path = quoted(getattr(request, "path", "") or "")
        message = shape.message.format(message=message, method=method, path=path)
    code = shape.alias if shape.alias != "" else error.code
    if isinstance(error, OpenAIError) and error.refinement is not None:
        code = error.refinement
    return {"error": {"message": message, "type": shape.type, "param": param, "code": code}}


def error_headers(error: ParleyError, *, auth_header: str | None = None) -> dict[str, str]:
    shape = OPENAI[error.error]
    headers = {}
    if not shape.retry:
        headers[SHOULD_RETRY] = "false"
    if isinstance(error, Throttled) and error.wait is not None:
        headers["Retry-After"] = str(error.wait)
    if shape.status == 401:
        headers["WWW-Authenticate"] = auth_header or "Bearer"
    return headers


def error_response(
    error: ParleyError, request: Any = None, *, auth_header: str | None = None
) -> Response:
    return Response(
        error_body(error, request),
        status=OPENAI[error.error].status,
        headers=error_headers(error, auth_header=auth_header),
    )


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response:
    """DRF's hook for the views of this API (OpenAIView.get_exception_handler)."""
    error = error_from(exc)
    if error is None:
        # A bug: logged with its traceback (its message only with PARLEY_LOG_CONTENT, as a
        # database error quotes the row it refused) and answered in the same shape.
        view = context.get("view").__class__.__name__
        log.error("unhandled error in %s", view, exc_info=exception_for_log(exc))
        error = ParleyError(codes.SERVER_ERROR)
    return error_response(
        error, context.get("request"), auth_header=getattr(exc, "auth_header", None)
    )


# Exempt: it changes nothing, and a POST to a path that does not exist is a 404, not a
# refused CSRF token.
@csrf_exempt
def unknown_url(request: HttpRequest, *args: Any, **kwargs: Any) -> JsonResponse:
    """Any path under /openai/v1/ that matches no endpoint, whoever asks."""
    error = ParleyError(codes.UNKNOWN_URL)
    return JsonResponse(
        error_body(error, request), status=OPENAI[error.error].status, headers=error_headers(error)
    )
