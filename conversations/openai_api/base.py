"""What every /openai/v1/ view shares: API-key authentication, the same per-user request
budget as /api/v1/, JSON in and out whatever the headers say (as OpenAI's API treats
them), the body limit, and OpenAI's error shape for everything that goes wrong."""

import re
from collections.abc import Callable, Iterable, Mapping
from typing import IO, Any

from django.conf import settings
from rest_framework.negotiation import BaseContentNegotiation
from rest_framework.parsers import BaseParser
from rest_framework.renderers import BaseRenderer
from rest_framework.request import Request
from rest_framework.views import APIView

from accounts.authentication import ApiKeyAuthentication
from accounts.permissions import ScopedPermission
from conversations import selectors
from conversations.errors import INVALID_JSON, REQUEST_TOO_LARGE, NotFound
from conversations.json_input import JsonInputError, json_parse
from conversations.models import Conversation
from conversations.openai_api import ids
from conversations.openai_api.errors import (
    OpenAIError,
    exception_handler,
    invalid,
    quoted,
)
from conversations.validation import type_name, unstorable_reason

_DIGITS = re.compile(r"[0-9]{1,6}")


class JSONBodyParser(BaseParser):
    """Every body is read as JSON through conversations.json_input (depth, numbers,
    storable text), whatever its Content-Type, as OpenAI's API reads them."""

    media_type = "*/*"

    def parse(
        self,
        stream: IO[Any],
        media_type: str | None = None,
        parser_context: Mapping[str, Any] | None = None,
    ) -> Any:
        raw = stream.read() if stream is not None else b""
        try:
            return json_parse(raw.decode("utf-8") if isinstance(raw, bytes) else raw)
        except UnicodeDecodeError:
            reason = "it is not valid UTF-8"
        except JsonInputError as exc:
            reason = str(exc)
        raise OpenAIError(
            INVALID_JSON, f"We could not parse the JSON body of your request: {reason}."
        )


class JSONOnly(BaseContentNegotiation):
    """Always JSON: an `Accept` header this API cannot honour changes nothing, where DRF
    would answer 406 (OpenAI's API answers JSON)."""

    def select_parser(self, request: Request, parsers: Iterable[BaseParser]) -> BaseParser:
        return next(iter(parsers))

    def select_renderer(
        self, request: Request, renderers: Iterable[BaseRenderer], format_suffix: str | None = None
    ) -> tuple[BaseRenderer, str]:
        renderer = next(iter(renderers))
        return renderer, renderer.media_type


class OpenAIView(APIView):
    """A view of /openai/v1/. Throttles and the renderer are DRF's defaults, the ones
    /api/v1/ uses: both doors spend one per-user budget, and answers holding text stored
    before the checks existed are repaired, not fatal."""

    authentication_classes = [ApiKeyAuthentication]
    # The method's scope: reads need `read`, writes `chat` (accounts.permissions).
    permission_classes = [ScopedPermission]
    parser_classes = [JSONBodyParser]
    content_negotiation_class = JSONOnly
    # Not part of /api/schema/: OpenAI's own API reference describes these endpoints.
    schema = None

    def get_exception_handler(self) -> Callable[[Exception, dict[str, Any]], Any]:
        return exception_handler

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        super().initial(request, *args, **kwargs)
        for name, values in request.query_params.lists():
            # Query text reaches lookups and is quoted in errors: the rule for stored text.
            reason = next(filter(None, map(unstorable_reason, [name, *values])), None)
            if reason:
                raise invalid(f"Query parameter {quoted(name)!r} {reason}.", param=quoted(name))
        limit = self.body_limit()
        if (
            limit is not None
            and request.method in ("POST", "PUT", "PATCH")
            and len(request.body) > limit
        ):
            raise OpenAIError(
                REQUEST_TOO_LARGE,
                f"The request body is {len(request.body)} bytes; the limit is {limit}."
                + self.body_hint,
            )

    # Said after a refusal of a body too large: what to do instead.
    body_hint = ""

    def body_limit(self) -> int | None:
        """The largest body this view takes; None: the view limits it itself (an upload,
        as it streams)."""
        limit: int = settings.PARLEY_API_MAX_BODY_BYTES
        return limit


class InputView(OpenAIView):
    """A view whose input items may carry files inline (base64 in the JSON body): the body
    may be as large as Django reads one, and what is not those files' bytes keeps the
    usual limit (`body_rest_check`, once the input is read)."""

    body_hint = " Upload large files to /openai/v1/files and send their file_id."

    def body_limit(self) -> int | None:
        limit: int = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        return limit


def body_rest_check(request: Request, *, inline_chars: int) -> None:
    """The body of an InputView, less the `inline_chars` that were files' bytes, within the
    usual body limit."""
    limit: int = settings.PARLEY_API_MAX_BODY_BYTES
    size = len(request.body)
    if size - inline_chars > limit:
        raise OpenAIError(
            REQUEST_TOO_LARGE,
            f"The request body is {size} bytes, {size - inline_chars} of them besides inline "
            f"files' bytes; the limit for those is {limit}.",
        )


# --- the request's parts ----------------------------------------------------------------


def body_object(request: Request, *, allowed: set[str]) -> dict[str, Any]:
    """The JSON body as an object with no parameter outside `allowed` (an empty body is
    an empty object)."""
    data = request.data
    if not isinstance(data, dict):
        raise invalid(
            f"The request body must be a JSON object, not {type_name(data)}.",
            param=None,
            code="invalid_type",
        )
    for name in data:
        if name not in allowed:
            raise invalid(
                f"Unknown parameter: '{quoted(name)}'.",
                param=quoted(name),
                code="unknown_parameter",
            )
    return data


def limit_param(request: Request, *, default: int, maximum: int) -> int:
    raw = request.query_params.get("limit")
    if raw is None or raw == "":
        return default
    # Plain decimal digits only: int() would also take "1_000", " 5" and other scripts'.
    value = int(raw) if _DIGITS.fullmatch(raw) else 0
    if not 1 <= value <= maximum:
        raise invalid(
            f"Invalid 'limit': must be an integer from 1 to {maximum}, got {quoted(raw)!r}.",
            param="limit",
        )
    return value


def choice_param(request: Request, name: str, *, choices: tuple[str, ...], default: str) -> str:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return default
    if raw not in choices:
        expected = " or ".join(repr(choice) for choice in choices)
        raise invalid(
            f"Invalid {name!r}: expected {expected}, got {quoted(raw)!r}.",
            param=name,
        )
    return raw


def conversation_for(request: Request, conversation_id: str) -> Conversation:
    """The requesting user's conversation: 404 for an unknown, malformed or another
    user's id alike, so ids reveal nothing."""
    key = ids.conversation_key(conversation_id)
    try:
        if key is None:
            raise Conversation.DoesNotExist
        return selectors.conversation_get(user=request.user, conversation_id=key)  # type: ignore[arg-type]
    except Conversation.DoesNotExist:
        raise NotFound(f"Conversation with id '{quoted(conversation_id)}' not found.") from None
