"""The API's JSON renderer: answers render even when stored text is not valid text.

Input is checked before it is stored, but a row written before those checks (SQLite keeps
a lone surrogate inside a JSON column) would make every answer that includes it fail to
encode. Such an answer is rendered with the text repaired instead of failing.
"""

from collections.abc import Mapping
from typing import Any

from rest_framework.renderers import JSONRenderer

from conversations.validation import storable_json


class StorableJSONRenderer(JSONRenderer):
    def render(
        self,
        data: Any,
        accepted_media_type: str | None = None,
        renderer_context: Mapping[str, Any] | None = None,
    ) -> bytes:
        try:
            return super().render(data, accepted_media_type, renderer_context)
        except UnicodeEncodeError:
            return super().render(storable_json(data), accepted_media_type, renderer_context)
