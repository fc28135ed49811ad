"""Every open tab of the owner follows how their conversations are organised: a socket on
one conversation hears another's pin, folder and tags change, and the whole folder list
when a folder changes; someone else's socket hears nothing."""

import pytest
from asgiref.sync import sync_to_async
from rest_framework.test import APIClient

from conversations import services
from tests.support.sockets import connect_as, receive_until


def _api_as(user) -> APIClient:
    client = APIClient()
    client.force_login(user)
    return client


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("redis_url", "fresh_throttles")
async def test_the_owners_sockets_hear_organising_and_folder_changes(owner, outsider):
    shown, other = [
        await sync_to_async(services.conversation_create)(owner=owner, title=t) for t in "AB"
    ]
    strangers = await sync_to_async(services.conversation_create)(owner=outsider)
    on_shown = await connect_as(owner, shown.pk)
    on_strangers = await connect_as(outsider, strangers.pk)
    api = await sync_to_async(_api_as)(owner)

    created = await sync_to_async(api.post)("/api/v1/folders/", {"name": "Work"}, format="json")
    assert created.status_code == 201
    folder_id = created.json()["id"]
    frame = (await receive_until(on_shown, "folders.changed"))[-1]
    assert frame["folders"] == [{"id": folder_id, "name": "Work", "position": 0}]

    answer = await sync_to_async(api.patch)(
        f"/api/v1/conversations/{other.pk}/",
        {"pinned": True, "folder_id": folder_id, "tags": ["b", "A"]},
        format="json",
    )
    assert answer.status_code == 200
    frame = (await receive_until(on_shown, "conversation.organised"))[-1]
    assert frame == {
        "type": "conversation.organised",
        "conversation_id": str(other.pk),
        "pinned": True,
        "folder_id": folder_id,
        "tags": ["A", "b"],
    }

    assert (await sync_to_async(api.delete)(f"/api/v1/folders/{folder_id}/")).status_code == 204
    assert (await receive_until(on_shown, "folders.changed"))[-1]["folders"] == []

    assert await on_strangers.receive_nothing(timeout=0.5)
    for ws in (on_shown, on_strangers):
        await ws.disconnect()
