"""Files in OpenAI's input: the `input_image` and `input_file` content parts of a user's
message, read from the request alone (nothing is looked up or stored here):

- `{"type": "input_image", "image_url": "data:image/png;base64,..."}` or
  `{"type": "input_image", "file_id": "file-..."}`; `detail` (auto, low, high) is
  accepted and changes nothing;
- `{"type": "input_file", "file_data": "data:application/pdf;base64,..." or plain base64,
  "filename": "report.pdf"}` or `{"type": "input_file", "file_id": "file-..."}`.

Parley fetches nothing from the network, so an `image_url` on the web and any `file_url`
are refused, saying how to send the file instead. Bytes past the file size limit are
refused before they are decoded. What the bytes are is decided later from the bytes, as
for an upload (files_in.py).
"""

import base64
import binascii
import re
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from django.conf import settings

from conversations.errors import FILE_TOO_LARGE, NOT_FOUND
from conversations.openai_api.errors import (
    OpenAIError,
    fields_check,
    invalid,
    quoted,
    wrong_type,
)
from conversations.openai_api.ids import file_key

IMAGE, FILE = "input_image", "input_file"
FILE_PARTS = frozenset({IMAGE, FILE})
_KNOWN = {
    IMAGE: {"type", "image_url", "file_id", "detail", "prompt_cache_breakpoint"},
    FILE: {
        "type",
        "file_data",
        "file_id",
        "file_url",
        "filename",
        "detail",
        "prompt_cache_breakpoint",
    },
}
# Where a part's file comes from: its bytes, or the id of a stored file.
_SOURCES = {IMAGE: ("image_url", "file_id"), FILE: ("file_data", "file_id")}
_DETAILS = ("auto", "low", "high", "original")
# An image sent inline has no name: it is named after the type its data URL declares.
_IMAGE_NAMES = {
    "image/png": "image.png",
    "image/jpeg": "image.jpg",
    "image/gif": "image.gif",
    "image/webp": "image.webp",
}
_SPACE = re.compile(r"\s+")
HOW_TO_SEND = (
    "send the bytes in the request (a base64 data URL) or upload the file to "
    "/openai/v1/files and send its file_id"
)


@dataclass(frozen=True)
class FilePart:
    """One file of a message, as the request gives it."""

    # The parameter of the part (`input[0].content[1]`) and of what holds its file
    # (`input[0].content[1].image_url`), to name it in a refusal.
    param: str
    source: str
    image: bool
    # A stored file's id, or bytes in the request with the name to store them under.
    file_key: UUID | None = None
    data: bytes = b""
    filename: str = ""


def file_part(part: dict[str, Any], param: str) -> FilePart:
    """The file of an `input_image` or `input_file` part, or a 400 naming the problem
    (a 404 for an id that names no file, a 413 for bytes past the limit)."""
    kind = part["type"]
    fields_check(part, param, required={"type"}, known=_KNOWN[kind])
    detail = part.get("detail")
    if detail is not None and detail not in _DETAILS:
        raise invalid(
            f"Invalid '{param}.detail': expected one of {', '.join(_DETAILS[:3])}, got "
            f"{quoted(detail)!r}.",
            param=f"{param}.detail",
        )
    if part.get("file_url") is not None:
        raise invalid(
            f"Invalid '{param}.file_url': Parley fetches nothing from the network; {HOW_TO_SEND}.",
            param=f"{param}.file_url",
        )
    inline, stored = _SOURCES[kind]
    given = [name for name in (inline, stored) if part.get(name) is not None]
    if len(given) != 1:
        raise invalid(
            f"Invalid '{param}': give exactly one of '{inline}' and '{stored}'.",
            param=f"{param}.{inline}",
            code=None if given else "missing_required_parameter",
        )
    source = f"{param}.{given[0]}"
    value = part[given[0]]
    if not isinstance(value, str):
        raise wrong_type(source, "a string", value)
    image = kind == IMAGE
    if given[0] == stored:
        key = file_key(value)
        if key is None:
            raise file_not_found(value, param=source)
        return FilePart(param=param, source=source, image=image, file_key=key)
    if image:
        declared, data = _data_url(value, source)
        filename = _IMAGE_NAMES.get(declared, "image")
    else:
        data = (
            _data_url(value, source)[1] if value[:5].lower() == "data:" else _base64(value, source)
        )
        filename = part.get("filename") or "file"
        if not isinstance(filename, str):
            raise wrong_type(f"{param}.filename", "a string", filename)
    return FilePart(param=param, source=source, image=image, data=data, filename=filename)


def inline_chars(items: Any) -> int:
    """The characters of input items (as the body holds them, unchecked) that are files'
    bytes: what a body may hold beyond the usual limit."""
    if not isinstance(items, list):
        return 0
    found = 0
    for item in items:
        content = item.get("content") if isinstance(item, dict) else None
        for part in content if isinstance(content, list) else ():
            if isinstance(part, dict) and part.get("type") in FILE_PARTS:
                value = part.get(_SOURCES[part["type"]][0])
                found += len(value) if isinstance(value, str) else 0
    return found


def file_not_found(raw: str, *, param: str) -> OpenAIError:
    """Unknown, malformed and another user's file ids alike: ids reveal nothing."""
    return OpenAIError(NOT_FOUND, f"No file with id '{quoted(raw)}' found.", param=param)


def _data_url(value: str, param: str) -> tuple[str, bytes]:
    """(the type a `data:<type>;base64,<data>` URL declares, its bytes)."""
    scheme = value[:8].lower()
    if scheme.startswith(("http://", "https://")):
        raise invalid(
            f"Invalid '{param}': Parley fetches nothing from the network, so it takes no "
            f"image URL; {HOW_TO_SEND}.",
            param=param,
        )
    head, comma, data = value.partition(",")
    if not scheme.startswith("data:") or not comma or not head.lower().endswith(";base64"):
        raise invalid(
            f"Invalid '{param}': expected a base64 data URL ('data:<type>;base64,<data>').",
            param=param,
        )
    declared = head[5:].rsplit(";", 1)[0].strip().lower()
    return declared, _base64(data, param)


def _base64(text: str, param: str) -> bytes:
    limit: int = settings.PARLEY_FILE_MAX_BYTES
    compact = _SPACE.sub("", text)
    # What the bytes will take is known before they are decoded: 3 bytes a 4 characters.
    if (len(compact) - compact.count("=")) * 3 // 4 > limit:
        raise _too_large(param, limit)
    try:
        data = base64.b64decode(compact + "=" * (-len(compact) % 4), validate=True)
    except (binascii.Error, ValueError):
        raise invalid(f"Invalid '{param}': this is not valid base64.", param=param) from None
    if len(data) > limit:
        raise _too_large(param, limit)
    if not data:
        raise invalid(f"Invalid '{param}': the file is empty.", param=param)
    return data


def _too_large(param: str, limit: int) -> OpenAIError:
    return OpenAIError(
        FILE_TOO_LARGE,
        f"The file in '{param}' is larger than {limit} bytes, the limit.",
        param=param,
    )
