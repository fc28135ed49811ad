"""Django's and DRF's own refusals in the vocabulary, so every door renders them as it
renders the domain's: an object that does not exist, a body too large, a failed
authentication, a spent request budget, a serializer's invalid fields."""

import math
from typing import Any

from django.apps import apps
from django.core.exceptions import ObjectDoesNotExist, RequestDataTooBig
from django.http import Http404
from rest_framework import exceptions

from accounts.scopes import ScopeMissing
from accounts.services import ApiKeyRevoked
from conversations.errors.exceptions import (
    NotFound,
    ParleyError,
    Problem,
    Throttled,
    ValidationFailed,
)
from conversations.errors.vocabulary import (
    AUTHENTICATION_FAILED,
    INSUFFICIENT_SCOPE,
    INVALID_JSON,
    METHOD_NOT_ALLOWED,
    NOT_ACCEPTABLE,
    NOT_AUTHENTICATED,
    PERMISSION_DENIED,
    REQUEST_TOO_LARGE,
    UNSUPPORTED_MEDIA_TYPE,
    VOCABULARY,
    ErrorCode,
)

_DRF_CODES: dict[type[exceptions.APIException], ErrorCode] = {
    exceptions.NotAuthenticated: NOT_AUTHENTICATED,
    exceptions.AuthenticationFailed: AUTHENTICATION_FAILED,
    exceptions.PermissionDenied: PERMISSION_DENIED,
    exceptions.MethodNotAllowed: METHOD_NOT_ALLOWED,
    exceptions.ParseError: INVALID_JSON,
    exceptions.UnsupportedMediaType: UNSUPPORTED_MEDIA_TYPE,
    exceptions.NotAcceptable: NOT_ACCEPTABLE,
}

# Codes only their own condition raises, never guessed from another refusal's status.
_NAMED_ONLY = frozenset({INSUFFICIENT_SCOPE})


def error_from(exc: BaseException) -> ParleyError | None:
    """`exc` as a refusal of the vocabulary; None for anything else (a bug)."""
    if isinstance(exc, ParleyError):
        return exc
    if isinstance(exc, ScopeMissing):
        return scope_refusal(exc)
    if isinstance(exc, ApiKeyRevoked):
        return ParleyError(AUTHENTICATION_FAILED, "Invalid or revoked API key.")
    if isinstance(exc, ObjectDoesNotExist):
        return NotFound(_no_such(exc))
    if isinstance(exc, Http404 | exceptions.NotFound):
        return NotFound()
    if isinstance(exc, RequestDataTooBig):
        return ParleyError(REQUEST_TOO_LARGE, "The request body is too large.")
    if isinstance(exc, exceptions.ValidationError):
        return ValidationFailed(drf_problems(exc.detail))
    if isinstance(exc, exceptions.Throttled):
        raw_wait = getattr(exc, "wait", None)
        wait = math.ceil(raw_wait) if raw_wait is not None else None
        # The cap on wrong passwords says what is locked, and for how long.
        own = str(exc.detail) if exc.get_codes() == "login_locked" else None
        return Throttled(wait, own)
    if isinstance(exc, exceptions.APIException):
        error = next((code for cls, code in _DRF_CODES.items() if isinstance(exc, cls)), None)
        if error is None:
            # Another library's refusal: known by its status when one code has it; a 5xx
            # is a bug to log.
            matching = [
                e
                for e in VOCABULARY.values()
                if e.status == exc.status_code < 500 and e not in _NAMED_ONLY
            ]
            error = matching[0] if len(matching) == 1 else None
        return ParleyError(error, _message(exc.detail)) if error is not None else None
    return None


def scope_refusal(exc: ScopeMissing) -> ParleyError:
    """A credential without the scope asked for: 403 `insufficient_scope`, naming it."""
    return ParleyError(INSUFFICIENT_SCOPE, str(exc), {"required_scope": exc.required})


def _no_such(exc: ObjectDoesNotExist) -> str:
    """ "No such message." for Message.DoesNotExist: the model's own name for itself."""
    for model in apps.get_models():
        if type(exc) is getattr(model, "DoesNotExist", None):
            return f"No such {model._meta.verbose_name}."
    return NotFound().message


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


def _message(detail: Any) -> str:
    if isinstance(detail, list | dict):
        return "; ".join(str(p) for p in drf_problems(detail))
    return str(detail)
