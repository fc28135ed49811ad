"""What an uploaded file is, decided from its bytes alone: never from its name or the
header the client sent.

Binary types are recognised by their signature (puremagic) and images are then opened by
Pillow restricted to the allowed formats, reading the header only: the pixel count is
checked before anything is decoded, so a decompression bomb costs nothing. Anything else
must be UTF-8 text without NUL, and not markup a browser would run (HTML, SVG, XML). Only
once the bytes are proven text does the name's extension choose among the text types
(Markdown, CSV); JSON is JSON when it parses.
"""

import codecs
import os
import unicodedata
import warnings
from dataclasses import dataclass
from typing import IO

import puremagic
from django.conf import settings
from PIL import Image, UnidentifiedImageError

from conversations.errors import (
    IMAGE_TOO_LARGE,
    UNSUPPORTED_FILE_TYPE,
    ParleyError,
    Problem,
    ValidationFailed,
)
from conversations.json_input import JsonInputError, json_parse
from conversations.models.files import FILENAME_MAX

HEAD_BYTES = 8192
CHUNK = 64 * 1024
IMAGES = {"PNG": "image/png", "JPEG": "image/jpeg", "GIF": "image/gif", "WEBP": "image/webp"}
PDF = "application/pdf"
BINARY = {*IMAGES.values(), PDF}
# Text a browser would render as a page or run as a script, whatever it is served as.
MARKUP_TYPES = {"text/html", "image/svg+xml", "application/xml", "text/xml"}
MARKUP_STARTS = (
    b"<!doctype",
    b"<html",
    b"<head",
    b"<body",
    b"<svg",
    b"<?xml",
    b"<script",
    b"<iframe",
)
# Larger text is not parsed to tell whether it is JSON (it stays text/plain).
JSON_SNIFF_MAX_BYTES = 4 * 1024 * 1024
TEXT_BY_EXTENSION = {".md": "text/markdown", ".markdown": "text/markdown", ".csv": "text/csv"}


@dataclass(frozen=True)
class FileKind:
    content_type: str
    width: int | None = None
    height: int | None = None


def _unsupported(message: str) -> ParleyError:
    return ParleyError(UNSUPPORTED_FILE_TYPE, f"{message} {UNSUPPORTED_FILE_TYPE.message}")


def _signatures(head: bytes) -> list[str]:
    try:
        return [match.mime_type for match in puremagic.magic_string(head)]
    except puremagic.PureError:
        return []


def _image(file: IO[bytes], expected: str) -> FileKind:
    file.seek(0)
    limit: int = settings.PARLEY_FILE_MAX_IMAGE_PIXELS
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            with Image.open(file, formats=list(IMAGES)) as image:
                width, height = image.size
                found = IMAGES.get(image.format or "")
    except Image.DecompressionBombError:
        raise ParleyError(
            IMAGE_TOO_LARGE, f"The image has more than {limit} pixels, the limit."
        ) from None
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError):
        raise _unsupported("The file looks like an image but cannot be read as one.") from None
    if found != expected:
        raise _unsupported("The file looks like an image but cannot be read as one.")
    if width * height > limit:
        raise ParleyError(
            IMAGE_TOO_LARGE,
            f"The image is {width}x{height} pixels; the limit is {limit} pixels.",
        )
    return FileKind(found, width, height)


def _is_utf8_text(file: IO[bytes]) -> bool:
    """Valid UTF-8 from end to end, without NUL; read in chunks."""
    file.seek(0)
    decoder = codecs.getincrementaldecoder("utf-8")()
    try:
        while chunk := file.read(CHUNK):
            if b"\x00" in chunk:
                return False
            decoder.decode(chunk)
        decoder.decode(b"", final=True)
    except UnicodeDecodeError:
        return False
    return True


def _is_markup(head: bytes, signatures: list[str]) -> bool:
    if MARKUP_TYPES.intersection(signatures):
        return True
    start = head.removeprefix(codecs.BOM_UTF8).lstrip().lower()
    return start.startswith(MARKUP_STARTS)


def _is_json(file: IO[bytes], head: bytes, size: int) -> bool:
    if size > JSON_SNIFF_MAX_BYTES or head.lstrip()[:1] not in (b"{", b"["):
        return False
    file.seek(0)
    try:
        json_parse(file.read().decode("utf-8"))
    except (JsonInputError, ValueError):
        return False
    return True


def _text(file: IO[bytes], head: bytes, size: int, filename: str) -> str:
    if _is_json(file, head, size):
        return "application/json"
    extension = os.path.splitext(filename)[1].lower()
    return TEXT_BY_EXTENSION.get(extension, "text/plain")


def file_kind_sniff(*, file: IO[bytes], size: int, filename: str) -> FileKind:
    """The file's type (and an image's size), or a refusal: 415 `unsupported_file_type`,
    400 `image_too_large`. `filename` only chooses among text types."""
    if size == 0:
        raise ValidationFailed([Problem("$.file", "is empty")], message="The file is empty.")
    file.seek(0)
    head = file.read(HEAD_BYTES)
    signatures = _signatures(head)
    binary = next((kind for kind in signatures if kind in BINARY), None)
    if binary in IMAGES.values():
        kind = _image(file, binary)  # type: ignore[arg-type]
    elif binary == PDF and b"%PDF-" in head[:1024]:
        kind = FileKind(PDF)
    elif _is_utf8_text(file):
        if _is_markup(head, signatures):
            raise _unsupported("HTML, SVG and XML files are not accepted.")
        kind = FileKind(_text(file, head, size, filename))
    else:
        raise _unsupported("The file's type is not one of those accepted.")
    if kind.content_type not in settings.PARLEY_FILE_TYPES:
        raise _unsupported(f"Files of type {kind.content_type} are not accepted here.")
    return kind


def filename_clean(name: str) -> str:
    """The last part of a client's file name, without control or format characters, at
    most FILENAME_MAX characters (the extension kept); "file" when nothing is left."""
    name = unicodedata.normalize("NFC", name.replace("\\", "/").rsplit("/", 1)[-1])
    name = "".join(ch for ch in name if unicodedata.category(ch)[0] not in ("C", "Z") or ch == " ")
    name = name.strip(" .") or "file"
    if len(name) > FILENAME_MAX:
        stem, extension = os.path.splitext(name)
        extension = extension[:16]
        name = stem[: FILENAME_MAX - len(extension)] + extension
    return name
