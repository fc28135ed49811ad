"""A stored file's bytes as an HTTP response, with the headers every door that serves a
file sends (the API's `files/{id}/content`, the admin's audited download): the type
decided at upload, never sniffed again by the browser, and a policy under which the file
can run nothing even when opened directly."""

from collections.abc import AsyncIterator
from typing import IO

from asgiref.sync import sync_to_async
from django.core.handlers.asgi import ASGIRequest
from django.http import FileResponse, HttpRequest

from conversations.models import StoredFile
from conversations.services import files_storage

# Shown in the browser: raster images. Everything else downloads (SVG and HTML are never
# stored, and would download too).
INLINE_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})
TEXT_TYPES = frozenset({"text/plain", "text/markdown", "text/csv", "application/json"})
FILE_CSP = "default-src 'none'; sandbox"
CHUNK_BYTES = 256 * 1024


def file_response(*, file: StoredFile, request: HttpRequest) -> FileResponse:
    """The file's bytes streamed from storage (never read whole)."""
    content_type = file.content_type
    if content_type in TEXT_TYPES:
        content_type += "; charset=utf-8"
    stream = files_storage().open(file.storage_name, "rb")
    response = FileResponse(
        stream,
        content_type=content_type,
        as_attachment=file.content_type not in INLINE_TYPES,
        filename=file.filename,
    )
    if isinstance(request, ASGIRequest):
        # Under ASGI Django reads a synchronous file response whole into memory before
        # sending it: read it a chunk per hop to a thread instead. (The file is still
        # closed with the response.)
        response.streaming_content = _chunks(stream)
    response["Content-Length"] = str(file.size)
    response["X-Content-Type-Options"] = "nosniff"
    response["Content-Security-Policy"] = FILE_CSP
    return response


async def _chunks(stream: IO[bytes]) -> AsyncIterator[bytes]:
    read = sync_to_async(stream.read, thread_sensitive=False)
    while chunk := await read(CHUNK_BYTES):
        yield chunk
