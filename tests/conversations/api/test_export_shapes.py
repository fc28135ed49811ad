"""`GET conversations/{id}/export/` of a conversation with many branches answers and
ends, through WSGI and ASGI; a download that fails part way ends too, saying so."""

from collections.abc import AsyncIterator
from typing import Any, cast

import pytest
from asgiref.sync import sync_to_async
from django.http import StreamingHttpResponse
from django.test import AsyncClient

from conversations import services
from conversations.formats import exporting
from tests.support import shapes


def _markdown(api: Any, conversation: Any) -> bytes:
    response = api.get(f"/api/v1/conversations/{conversation.pk}/export/?format=markdown")
    assert response.status_code == 200
    return b"".join(response.streaming_content)


@pytest.mark.django_db
def test_the_markdown_export_of_a_thousand_branches_answers_and_ends(owner, as_user):
    conversation = services.conversation_import(owner=owner, document=shapes.siblings(1100))
    body = _markdown(as_user(owner), conversation).decode()
    assert "Version 1 of 1100 at this point" in body
    assert body.endswith("---\n\n")


@pytest.mark.django_db
def test_an_export_failing_part_way_ends_saying_so(owner, as_user, monkeypatch):
    conversation = services.conversation_import(owner=owner, document=shapes.staircase(4))
    written = exporting._markdown_message

    def failing(message: Any) -> str:
        if message.seq == 3:
            raise RuntimeError("the disk went away")
        return written(message)

    monkeypatch.setattr(exporting, "_markdown_message", failing)
    body = _markdown(as_user(owner), conversation).decode()
    assert "step 1" in body
    assert "step 2" not in body
    assert body.endswith(exporting.MARKDOWN_CUT)


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("close_thread_connections")
async def test_under_asgi_the_markdown_export_of_many_branches_ends(owner):
    conversation = await sync_to_async(services.conversation_import)(
        owner=owner, document=shapes.siblings(1100)
    )
    client = AsyncClient()
    await client.aforce_login(owner)
    got = await client.get(f"/api/v1/conversations/{conversation.pk}/export/?format=markdown")
    assert got.status_code == 200
    chunks = cast(AsyncIterator[bytes], cast(StreamingHttpResponse, got).streaming_content)
    body = b"".join([chunk async for chunk in chunks])
    assert b"Version 1 of 1100 at this point" in body
    assert body.endswith(b"---\n\n")
