"""Request bodies bounded at the edge, before Django reads them.

Django's ASGI handler reads a whole request body (to memory, then a temporary file) before
any view runs, so a view's own limit would only refuse a body already received whole: a
client could fill the disk with one request. This middleware refuses a body larger than
the largest its path can take: at once when Content-Length says so, and the moment the
bytes pass it when the body is chunked. Each view still applies its exact limit.

The refusal is a 413 in the shape of the door it was sent to (/openai/v1 or /api/v1).
"""

import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from django.conf import settings

from conversations.errors import REQUEST_TOO_LARGE
from conversations.uploads import ENVELOPE_BYTES

Scope = dict[str, Any]
Message = Mapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]

# Beside the largest file or document a body carries: the multipart envelope (boundaries,
# part headers, small fields) or a JSON body's other fields.
FRAMING_BYTES = ENVELOPE_BYTES
FILE_UPLOADS = ("/api/v1/files/", "/openai/v1/files")
IMPORTS = ("/api/v1/conversations/import/",)


def body_limit(path: str) -> int:
    """The largest body any view at `path` takes, framing included."""
    if path in FILE_UPLOADS:
        return int(settings.PARLEY_FILE_MAX_BYTES) + FRAMING_BYTES
    if path in IMPORTS:
        largest = max(settings.PARLEY_IMPORT_ZIP_MAX_BYTES, settings.PARLEY_IMPORT_MAX_BYTES)
        return int(largest) + FRAMING_BYTES
    return int(settings.DATA_UPLOAD_MAX_MEMORY_SIZE) + FRAMING_BYTES


def _refusal(path: str, limit: int) -> bytes:
    message = f"The request body is larger than {limit} bytes, the most this URL takes."
    if path.startswith("/openai/"):
        error: dict[str, Any] = {
            "message": message,
            "type": "invalid_request_error",
            "param": None,
            "code": REQUEST_TOO_LARGE.code,
        }
    else:
        error = {"code": REQUEST_TOO_LARGE.code, "message": message}
    return json.dumps({"error": error}).encode()


class BodyLimit:
    def __init__(self, app: App) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path: str = scope.get("path", "")
        limit = body_limit(path)
        declared = _content_length(scope)
        if declared is not None and declared > limit:
            await _refuse(send, path, limit)
            return
        received = 0
        over = False
        started = False

        async def counted_receive() -> Message:
            nonlocal received, over
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    # Django stops reading at a disconnect and answers nothing: the
                    # refusal is sent below.
                    over = True
                    return {"type": "http.disconnect"}
            return message

        async def watched_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        await self.app(scope, counted_receive, watched_send)
        if over and not started:
            await _refuse(send, path, limit)


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", []):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


async def _refuse(send: Send, path: str, limit: int) -> None:
    body = _refusal(path, limit)
    await send(
        {
            "type": "http.response.start",
            "status": 413,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"connection", b"close"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
