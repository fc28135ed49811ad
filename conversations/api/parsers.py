"""The API's one body parser: JSON read through conversations.json_input, so a deep,
non-finite or unstorable body is a 400 `invalid_json` naming the problem's path, never a
500 or a half-stored request."""

from collections.abc import Mapping
from typing import IO, Any

from django.conf import settings
from rest_framework.parsers import JSONParser

from conversations.errors import INVALID_JSON, Problem, ValidationFailed
from conversations.json_input import JsonInputError, json_parse


class StrictJSONParser(JSONParser):
    def parse(
        self,
        stream: IO[Any],
        media_type: str | None = None,
        parser_context: Mapping[str, Any] | None = None,
    ) -> Any:
        encoding = (parser_context or {}).get("encoding", settings.DEFAULT_CHARSET)
        raw = stream.read() if stream is not None else b""
        try:
            return json_parse(raw.decode(encoding) if isinstance(raw, bytes) else raw)
        except UnicodeDecodeError:
            message = f"The body is not valid {encoding}."
            raise ValidationFailed(error=INVALID_JSON, message=message) from None
        except JsonInputError as exc:
            raise ValidationFailed(
                [Problem(exc.path, exc.message)],
                INVALID_JSON,
                message=f"The body is not acceptable JSON: {exc}.",
            ) from None
