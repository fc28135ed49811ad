"""Files of each kind, made here from nothing, and an upload of them."""

import io
import struct
import sys
import zlib
from typing import IO, Any

from django.core.files.uploadedfile import SimpleUploadedFile
from django.test.client import ClientHandler
from PIL import Image
from rest_framework.test import APIClient

from conversations import services
from conversations.models import StoredFile


def image_bytes(kind: str, size: tuple[int, int] = (4, 3)) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", size, (200, 30, 30)).save(out, kind)
    return out.getvalue()


def png_header(width: int, height: int) -> bytes:
    """A PNG that claims `width` x `height` pixels in its header (and holds none)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (
            struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
        )

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IEND", b"")


PDF = b"%PDF-1.4\n1 0 obj << /Type /Catalog >> endobj\ntrailer << /Root 1 0 R >>\n%%EOF\n"


def upload(client: APIClient, data: bytes, name: str = "x.bin", content_type: str = "") -> Any:
    """POST files/ with `data` as the multipart field `file`."""
    part = SimpleUploadedFile(name, data, content_type=content_type or "application/octet-stream")
    return client.post("/api/v1/files/", {"file": part}, format="multipart")


def stored_names() -> list[str]:
    """Every object in the files storage (files/<owner>/<sha256>), whichever storage it is
    (a bucket has no folders to ask exists() about: listing one with nothing in it is
    empty)."""
    storage = services.files_storage()
    try:
        owners = storage.listdir("files")[0]
    except FileNotFoundError:
        return []
    found = []
    for owner in owners:
        found += [f"files/{owner}/{name}" for name in storage.listdir(f"files/{owner}")[1]]
    return sorted(found)


def file_make(owner: Any, data: bytes = b"hello", name: str = "a.txt") -> StoredFile:
    staged = services.file_stage(source=io.BytesIO(data))
    try:
        stored, _ = services.file_store(owner=owner, staged=staged, filename=name)
    finally:
        staged.close()
    return stored


# --- an upload made as it is read -------------------------------------------------------

BOUNDARY = "parley-upload-boundary"


class Letters(io.RawIOBase):
    """`size` bytes of "a", made as they are read."""

    def __init__(self, size: int) -> None:
        self.left = size

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        count = self.left if size < 0 else min(size, self.left)
        self.left -= count
        return b"a" * count


class MultipartBody(io.RawIOBase):
    """A multipart body whose one part is `file`: `size` bytes read from `source` as the
    body is read, never held whole. `position` counts what was read."""

    def __init__(
        self, source: IO[bytes] | io.RawIOBase, size: int, filename: str = "big.txt"
    ) -> None:
        self.head = (
            f"--{BOUNDARY}\r\n"
            f'Content-Disposition: form-data; name="file"; filename="{filename}"\r\n'
            "Content-Type: application/octet-stream\r\n\r\n"
        ).encode()
        self.tail = f"\r\n--{BOUNDARY}--\r\n".encode()
        self.source, self.size = source, size
        self.length = len(self.head) + size + len(self.tail)
        self.position = 0

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        end = self.length if size < 0 else min(self.length, self.position + size)
        out = bytearray()
        while self.position < end:
            body_end = len(self.head) + self.size
            if self.position < len(self.head):
                piece = self.head[self.position : end]
            elif self.position < body_end:
                piece = self.source.read(min(end, body_end) - self.position)
            else:
                start = self.position - body_end
                piece = self.tail[start : start + end - self.position]
            out += piece
            self.position += len(piece)
        return bytes(out)


def streamed_post(body: MultipartBody, secret: str) -> Any:
    """POST files/ through Django's request handling (as the WSGI server would call it),
    the body read from `body` as the handler asks for it, with an API key."""
    environ = {
        "REQUEST_METHOD": "POST",
        "PATH_INFO": "/api/v1/files/",
        "SCRIPT_NAME": "",
        "QUERY_STRING": "",
        "SERVER_NAME": "localhost",
        "SERVER_PORT": "80",
        "SERVER_PROTOCOL": "HTTP/1.1",
        "HTTP_HOST": "localhost",
        "CONTENT_TYPE": f"multipart/form-data; boundary={BOUNDARY}",
        "CONTENT_LENGTH": str(body.length),
        "HTTP_AUTHORIZATION": f"Bearer {secret}",
        "wsgi.input": body,
        "wsgi.url_scheme": "http",
        "wsgi.errors": sys.stderr,
        "wsgi.multithread": False,
        "wsgi.multiprocess": False,
        "wsgi.run_once": False,
    }
    return ClientHandler(enforce_csrf_checks=False)(environ)


def pdf_bytes(*pages: str) -> bytes:
    """A PDF with one page per string, each holding that text (extractable, as a
    word processor's PDF is)."""
    from fpdf import FPDF

    document = FPDF()
    document.set_font("helvetica", size=12)
    for text in pages:
        document.add_page()
        document.multi_cell(0, 10, text)
    return bytes(document.output())
