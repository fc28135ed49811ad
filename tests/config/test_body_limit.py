"""Bodies bounded at the ASGI edge: a body larger than its URL can take is refused before
Django reads it (at once from Content-Length, or as it passes the limit when chunked),
in the shape of the door it was sent to; others pass through untouched."""

import asyncio
import json
from collections.abc import Mapping
from typing import Any

import pytest
from django.core.asgi import get_asgi_application

from config.body_limit import FRAMING_BYTES, BodyLimit, body_limit

pytestmark = pytest.mark.django_db(transaction=True)
CHUNK = 64 * 1024


class Client:
    """One request through BodyLimit around the real Django application, its body sent
    in chunks and the number of chunks read counted."""

    def __init__(self, *, path: str, size: int, declared: bool) -> None:
        self.path, self.size, self.declared = path, size, declared
        self.chunks_read = 0
        self.done = False
        self.sent: list[dict[str, Any]] = []

    async def run(self) -> tuple[int, dict[str, Any]]:
        headers = [(b"content-type", b"application/octet-stream")]
        if self.declared:
            headers.append((b"content-length", str(self.size).encode()))
        scope = {
            "type": "http",
            "method": "POST",
            "path": self.path,
            "raw_path": self.path.encode(),
            "query_string": b"",
            "headers": headers,
            "server": ("testserver", 80),
            "client": ("127.0.0.1", 1),
            "scheme": "http",
            "http_version": "1.1",
            "asgi": {"version": "3.0"},
        }
        left = self.size

        async def receive() -> dict[str, Any]:
            nonlocal left
            if self.done:
                await asyncio.Event().wait()  # a client that stays connected
            self.chunks_read += 1
            piece = min(CHUNK, left)
            left -= piece
            self.done = left == 0
            return {"type": "http.request", "body": b"a" * piece, "more_body": left > 0}

        async def send(message: Mapping[str, Any]) -> None:
            self.sent.append(dict(message))

        await BodyLimit(get_asgi_application())(scope, receive, send)
        status = next(m["status"] for m in self.sent if m["type"] == "http.response.start")
        body = b"".join(m.get("body", b"") for m in self.sent if m["type"] == "http.response.body")
        return status, json.loads(body) if body.startswith(b"{") else {}


def test_each_url_takes_the_largest_body_its_view_can(settings):
    settings.PARLEY_FILE_MAX_BYTES = 1000
    assert body_limit("/api/v1/files/") == 1000 + FRAMING_BYTES
    assert body_limit("/openai/v1/files") == 1000 + FRAMING_BYTES
    assert body_limit("/api/v1/conversations/import/") > settings.PARLEY_IMPORT_ZIP_MAX_BYTES
    assert body_limit("/api/v1/conversations/") == (
        settings.DATA_UPLOAD_MAX_MEMORY_SIZE + FRAMING_BYTES
    )


async def test_a_declared_length_over_the_limit_is_refused_before_any_byte_is_read(settings):
    settings.PARLEY_FILE_MAX_BYTES = 1000
    client = Client(path="/api/v1/files/", size=50 * 1024 * 1024, declared=True)

    status, body = await client.run()

    assert status == 413
    assert body["error"]["code"] == "request_too_large"
    assert "larger than" in body["error"]["message"]
    assert client.chunks_read == 0


async def test_a_chunked_body_is_cut_off_as_it_passes_the_limit(settings):
    settings.PARLEY_FILE_MAX_BYTES = 1000
    client = Client(path="/api/v1/files/", size=50 * 1024 * 1024, declared=False)

    status, _ = await client.run()

    assert status == 413
    # The limit and one chunk past it, not the 800 chunks sent.
    assert client.chunks_read <= (1000 + FRAMING_BYTES) // CHUNK + 2


async def test_the_openai_door_refuses_in_its_own_shape(settings):
    settings.PARLEY_FILE_MAX_BYTES = 1000
    status, body = await Client(path="/openai/v1/files", size=10**8, declared=True).run()

    assert status == 413
    assert body["error"]["type"] == "invalid_request_error"
    assert body["error"]["code"] == "request_too_large"
    assert {"message", "param"} <= set(body["error"])


async def test_a_body_within_the_limit_reaches_the_view(settings):
    settings.PARLEY_FILE_MAX_BYTES = 1000
    client = Client(path="/api/v1/files/", size=100, declared=True)

    status, body = await client.run()

    # Unauthenticated: the view answered, having read the whole body.
    assert status == 401
    assert body["error"]["code"] != "request_too_large"
