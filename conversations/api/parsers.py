"""The API's one body parser: JSON read through conversations.json_input, so a deep,
non-finite or unstorable body is a 400 `invalid_json` naming the problem's path, never a
500 or a half-stored request."""

from collections.abc import Mapping
from typing import IO, Any

from django.conf import settings
from rest_framework.parsers import JSONParser

from conversations.api.errors import ApiError
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
            raise ApiError(400, "invalid_json", f"The body is not valid {encoding}.") from None
        except JsonInputError as exc:
            raise ApiError(
                400,
                "invalid_json",
                f"The body is not acceptable JSON: {exc}.",
                {"problems": [{"path": exc.path, "message": exc.message}]},
            ) from None
