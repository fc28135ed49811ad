"""Streamed downloads: pieces are gathered to a useful size, and under ASGI the export
generator is driven piece by piece (never read whole into memory first)."""

import zipfile
from io import BytesIO

import pytest
from django.test import AsyncRequestFactory, RequestFactory

from conversations.admin import streaming
from conversations.formats import archives
from conversations.models import Conversation
from tests.support.admin import chat


def test_wsgi_download_gathers_small_chunks_into_larger_pieces():
    chunks = (b"x" * 1000 for _ in range(600))
    response = streaming.download(
        RequestFactory().get("/"), chunks, filename="a.jsonl", content_type="text/plain"
    )
    pieces = list(response.streaming_content)  # type: ignore[arg-type]
    assert b"".join(pieces) == b"x" * 600_000
    assert len(pieces) == 3  # 256 KiB, 256 KiB, the rest
    assert response["Content-Disposition"] == 'attachment; filename="a.jsonl"'


async def test_asgi_download_pulls_the_generator_lazily():
    pulled = []

    def chunks():
        for index in range(1000):
            pulled.append(index)
            yield b"y" * 1024

    response = streaming.download(
        AsyncRequestFactory().get("/"), chunks(), filename="b.csv", content_type="text/csv"
    )
    assert response.is_async
    iterator = aiter(response.streaming_content)  # type: ignore[arg-type]
    first = await anext(iterator)
    assert len(first) == 256 * 1024
    assert len(pulled) == 256  # only what the first piece needed
    rest = [piece async for piece in iterator]
    assert sum(len(p) for p in [first, *rest]) == 1000 * 1024


@pytest.mark.django_db
def test_zip_stream_is_a_valid_archive_even_for_an_empty_selection(owner):
    empty = b"".join(archives.json_zip_stream(Conversation.objects.none()))
    assert zipfile.ZipFile(BytesIO(empty)).namelist() == []
    conversation = chat(owner)
    data = b"".join(archives.markdown_zip_stream(Conversation.objects.all()))
    assert zipfile.ZipFile(BytesIO(data)).namelist() == [f"{conversation.pk}.md"]
