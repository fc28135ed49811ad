"""The running app is ASGI (Daphne): the paths that behave differently there."""

from collections.abc import AsyncIterator
from typing import cast

import pytest
from asgiref.sync import sync_to_async
from django.http import StreamingHttpResponse
from django.test import AsyncClient

from conversations import services

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("close_thread_connections"),
]


async def test_an_export_streams_asynchronously_under_asgi(owner, conversation):
    await sync_to_async(services.messages_append)(
        conversation=conversation,
        messages=[services.NewMessage(role="user", content=f"line {i}") for i in range(250)],
    )
    client = AsyncClient()
    await client.aforce_login(owner)
    got = await client.get(f"/api/v1/conversations/{conversation.pk}/export/?format=jsonl")
    assert got.status_code == 200
    response = cast(StreamingHttpResponse, got)
    assert response.is_async  # served chunk by chunk, not read into memory first
    chunks = cast(AsyncIterator[bytes], response.streaming_content)
    body = b"".join([chunk async for chunk in chunks])
    assert body.count(b'"role": "user"') == 250


async def test_the_async_chat_view_answers_options_and_refuses_get(owner):
    client = AsyncClient()
    await client.aforce_login(owner)
    assert (await client.options("/api/v1/chat/")).status_code == 200
    refused = await client.get("/api/v1/chat/")
    assert refused.status_code == 405
    assert refused.json()["error"]["code"] == "method_not_allowed"
    assert (await AsyncClient().post("/api/v1/chat/", {"message": "x"})).status_code == 401


async def test_a_file_download_streams_asynchronously_under_asgi(owner):
    from tests.support.files import file_make

    data = b"a,b,c\n1,2,3\n" * 90_000  # about 1 MiB: several chunks
    stored = await sync_to_async(file_make)(owner, data, "table.csv")
    client = AsyncClient()
    await client.aforce_login(owner)

    got = await client.get(f"/api/v1/files/{stored.pk}/content")

    assert got.status_code == 200
    response = cast(StreamingHttpResponse, got)
    assert response.is_async  # read a chunk at a time, not whole before the first byte
    chunks = cast(AsyncIterator[bytes], response.streaming_content)
    pieces = [chunk async for chunk in chunks]
    assert len(pieces) > 1
    assert b"".join(pieces) == data
    assert response["X-Content-Type-Options"] == "nosniff"
