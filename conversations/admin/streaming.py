"""Streamed downloads that keep memory flat under both ASGI (Daphne) and WSGI.

Under ASGI, Django serves a *synchronous* iterator by first reading it whole into a list,
which would hold an entire export in memory. So under ASGI the export generator is driven
from an async iterator, each step run in the thread that serves sync code (where the
database connection lives), taking about FLUSH_BYTES per hop to keep hops few.
"""

from collections.abc import AsyncIterator, Iterator

from asgiref.sync import sync_to_async
from django.core.handlers.asgi import ASGIRequest
from django.http import HttpRequest, StreamingHttpResponse

FLUSH_BYTES = 256 * 1024


def _take(chunks: Iterator[bytes]) -> bytes:
    parts: list[bytes] = []
    size = 0
    for chunk in chunks:
        parts.append(chunk)
        size += len(chunk)
        if size >= FLUSH_BYTES:
            break
    return b"".join(parts)


def _sync(chunks: Iterator[bytes]) -> Iterator[bytes]:
    while piece := _take(chunks):
        yield piece


async def _async(chunks: Iterator[bytes]) -> AsyncIterator[bytes]:
    take = sync_to_async(_take, thread_sensitive=True)
    try:
        while piece := await take(chunks):
            yield piece
    finally:
        # A client that went away: close the generator (and its database cursor) in the
        # same thread that ran it.
        await sync_to_async(chunks.close, thread_sensitive=True)()  # type: ignore[attr-defined]


def download(
    request: HttpRequest, chunks: Iterator[bytes], *, filename: str, content_type: str
) -> StreamingHttpResponse:
    content = _async(chunks) if isinstance(request, ASGIRequest) else _sync(chunks)
    response = StreamingHttpResponse(content, content_type=content_type)
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response
