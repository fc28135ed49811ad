"""What every API view shares: body limits, valid bodies, the requested conversation,
JSON pages, Idempotency-Key, async views."""

import functools
import hashlib
import inspect
import json
import re
from collections.abc import Callable, Sequence
from typing import Any, TypeVar
from urllib.parse import urlencode

from asgiref.sync import sync_to_async
from django.conf import settings
from django.http import HttpRequest
from django.http.response import HttpResponseBase
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts import services as account_services
from conversations import selectors
from conversations.api.renderers import StorableJSONRenderer
from conversations.errors import (
    IDEMPOTENCY_ANSWER_GONE,
    IDEMPOTENCY_ANSWER_NOT_KEPT,
    IDEMPOTENCY_IN_FLIGHT,
    IDEMPOTENCY_KEY_REUSED,
    REQUEST_TOO_LARGE,
    ParleyError,
    Problem,
    ValidationFailed,
)
from conversations.models import Conversation
from conversations.validation import key_path, unstorable_reason

IDEMPOTENCY_HEADER = "Idempotency-Key"
_INTEGER = re.compile(r"-?[0-9]{1,18}")
REPLAYED_HEADER = "Idempotent-Replayed"
# On a replay: the answer's fields that held a secret, shown once and never stored.
WITHHELD_HEADER = "Idempotent-Withheld"

F = TypeVar("F", bound=Callable[..., Any])


class ApiView(APIView):
    """A DRF view with a request body limit."""

    def body_limit(self) -> int | None:
        """The largest body read whole; None for a view that streams its body and limits
        it as it reads (an upload)."""
        limit: int = settings.PARLEY_API_MAX_BODY_BYTES
        return limit

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        super().initial(request, *args, **kwargs)
        for name, values in request.query_params.lists():
            # Query text reaches database lookups and is echoed in `next` links: the same
            # rule as for stored text (no NUL, no unpaired surrogate).
            reason = next(filter(None, map(unstorable_reason, [name, *values])), None)
            if reason:
                path = key_path("$.query", name)
                raise ValidationFailed(
                    [Problem(path, reason)], message=f"Query parameter {path!r} {reason}."
                )
        limit = self.body_limit()
        if (
            limit is not None
            and request.method in ("POST", "PUT", "PATCH")
            and len(request.body) > limit
        ):
            raise ParleyError(
                REQUEST_TOO_LARGE,
                f"The request body is {len(request.body)} bytes; the limit is {limit}.",
            )


class AsyncApiView(ApiView):
    """An APIView whose handlers are coroutines: authentication, permissions, throttles and
    the body limit run in a thread, then the handler awaits without holding one."""

    view_is_async = True

    async def dispatch(  # type: ignore[override]
        self, request: HttpRequest, *args: Any, **kwargs: Any
    ) -> HttpResponseBase:
        self.args, self.kwargs = args, kwargs
        drf_request = self.initialize_request(request, *args, **kwargs)
        self.request = drf_request
        self.headers = self.default_response_headers
        try:
            await sync_to_async(self.initial)(drf_request, *args, **kwargs)
            method = (drf_request.method or "").lower()
            handler = getattr(self, method, None) if method in self.http_method_names else None
            if handler is None or not inspect.iscoroutinefunction(handler):
                self.http_method_not_allowed(drf_request, *args, **kwargs)
            response = await handler(drf_request, *args, **kwargs)  # type: ignore[misc]
        except Exception as exc:
            response = self.handle_exception(exc)
        self.response = self.finalize_response(drf_request, response, *args, **kwargs)
        return self.response

    async def options(  # type: ignore[override]
        self, request: Request, *args: Any, **kwargs: Any
    ) -> Response:
        return super().options(request, *args, **kwargs)


def valid_body(
    serializer_class: type, request: Request, *, partial: bool = False
) -> dict[str, Any]:
    """The request body checked by a (strict) input serializer: a 400 naming each problem's
    path, or the validated fields."""
    serializer = serializer_class(data=request.data, partial=partial)
    serializer.is_valid(raise_exception=True)
    data: dict[str, Any] = dict(serializer.validated_data)
    return data


def conversation_for(request: Request, conversation_id: Any) -> Conversation:
    """The requesting user's conversation, or Conversation.DoesNotExist (a 404, also for
    another user's or a malformed id)."""
    return selectors.conversation_get(user=request.user, conversation_id=conversation_id)  # type: ignore[arg-type]


# --- pages -----------------------------------------------------------------------------


def page_response(
    request: Request, results: list[Any], next_params: dict[str, Any] | None
) -> Response:
    """`{"results": [...], "next": <url or null>}`; `next` keeps the request's other
    query parameters and replaces the cursor ones."""
    next_url = None
    if next_params is not None:
        params = dict(request.query_params.items())
        params.update({key: str(value) for key, value in next_params.items()})
        next_url = request.build_absolute_uri(f"{request.path}?{urlencode(params)}")
    return Response({"results": results, "next": next_url})


def query_param_invalid(name: str, message: str) -> ValidationFailed:
    """The refusal of query parameter `name`, `message` saying what it must be."""
    return ValidationFailed(
        [Problem(f"$.query.{name}", message)], message=f"Query parameter {name!r} {message}."
    )


def int_param(request: Request, name: str, default: int, *, minimum: int = 0) -> int:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return default
    # Plain decimal digits only: int() would also take "1_000", " 5" and other scripts'
    # digits, and any number of them.
    value = int(raw) if _INTEGER.fullmatch(raw) else minimum - 1
    if value < minimum:
        raise query_param_invalid(name, f"must be a whole number of at least {minimum}")
    return value


def choice_param(request: Request, name: str, choices: Sequence[str], default: str) -> str:
    """Query parameter `name`, one of `choices` (`default` when absent)."""
    raw = request.query_params.get(name, default)
    if raw not in choices:
        *first, last = choices
        raise query_param_invalid(name, f"must be {', '.join(first)} or {last}")
    return raw


# --- Idempotency-Key -------------------------------------------------------------------


def _fingerprint(request: Request) -> str:
    digest = hashlib.sha256()
    digest.update(f"{request.method} {request.get_full_path()}\n".encode())
    # A body the view staged as it arrived (an import's ZIP) is known by its sha256.
    staged = getattr(request, "staged_body", None)
    digest.update(staged.sha256.encode() if staged is not None else request.body)
    return digest.hexdigest()


def _begin(request: Request) -> Any:
    """None without the header; else the record (completed: replay it; open: ours)."""
    key = request.headers.get(IDEMPOTENCY_HEADER)
    if key is None:
        return None
    try:
        return account_services.idempotency_begin(
            owner=request.user,  # type: ignore[arg-type]
            key=key,
            fingerprint=_fingerprint(request),
        )
    except ValueError as exc:
        path = key_path("$.headers", IDEMPOTENCY_HEADER)
        raise ValidationFailed(
            [Problem(path, str(exc))], message=f"{IDEMPOTENCY_HEADER} {exc}."
        ) from None
    except account_services.IdempotencyInFlight:
        raise ParleyError(IDEMPOTENCY_IN_FLIGHT) from None
    except account_services.IdempotencyKeyReused:
        raise ParleyError(IDEMPOTENCY_KEY_REUSED) from None


def _replay(view: APIView, record: Any) -> Response:
    if not getattr(view, "idempotency_keeps_answer", True):
        raise ParleyError(IDEMPOTENCY_ANSWER_NOT_KEPT)
    if record.status_code == account_services.ANSWER_GONE_STATUS:
        raise ParleyError(IDEMPOTENCY_ANSWER_GONE)
    response = Response(record.body, status=record.status_code)
    response[REPLAYED_HEADER] = "true"
    withheld = getattr(view, "idempotency_withheld", ())
    if withheld:
        response[WITHHELD_HEADER] = ", ".join(withheld)
    return response


def _finish(view: APIView, record: Any, response: Any) -> None:
    """Successful answers are kept for repeats, without what must never be stored: the
    fields a view names in `idempotency_withheld` (secrets, stored as null) or the whole
    answer when the view sets `idempotency_keeps_answer = False`. A failed request frees
    its key, so the client may fix the problem (or wait out a conflict) and retry."""
    if isinstance(response, Response) and 200 <= response.status_code < 300:
        body = None
        if getattr(view, "idempotency_keeps_answer", True):
            body = json.loads(StorableJSONRenderer().render(response.data) or b"null")
            withheld = getattr(view, "idempotency_withheld", ())
            if withheld and isinstance(body, dict):
                body = {**body, **dict.fromkeys(withheld)}
        account_services.idempotency_complete(
            record=record, status_code=response.status_code, body=body
        )
    else:
        account_services.idempotency_release(record=record)


def idempotent(handler: F) -> F:
    """Honour `Idempotency-Key` on a view's POST handler (sync or async)."""
    if inspect.iscoroutinefunction(handler):

        @functools.wraps(handler)
        async def async_wrapper(view: APIView, request: Request, *args: Any, **kwargs: Any) -> Any:
            record = await sync_to_async(_begin)(request)
            if record is None:
                return await handler(view, request, *args, **kwargs)
            if record.completed_at is not None:
                return _replay(view, record)
            try:
                response = await handler(view, request, *args, **kwargs)
            except BaseException:
                await sync_to_async(account_services.idempotency_release)(record=record)
                raise
            await sync_to_async(_finish)(view, record, response)
            return response

        return async_wrapper  # type: ignore[return-value]

    @functools.wraps(handler)
    def wrapper(view: APIView, request: Request, *args: Any, **kwargs: Any) -> Any:
        record = _begin(request)
        if record is None:
            return handler(view, request, *args, **kwargs)
        if record.completed_at is not None:
            return _replay(view, record)
        try:
            response = handler(view, request, *args, **kwargs)
        except BaseException:
            account_services.idempotency_release(record=record)
            raise
        _finish(view, record, response)
        return response

    return wrapper  # type: ignore[return-value]
