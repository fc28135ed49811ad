"""Files in messages sent over the socket: `message.create` and `message.edit` take
`attachments` as the API does, and every tab hears the message with its files."""

from typing import Any

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator

from conversations.models import Attachment, Message, Run
from tests.support.files import file_make
from tests.support.sockets import connect_as, receive_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("redis_url")]


async def heard(ws: WebsocketCommunicator, role: str = "user") -> dict[str, Any]:
    """The next message of `role` the socket hears stored (other frames skipped)."""
    while True:
        frame = await ws.receive_json_from(timeout=5)
        assert frame["type"] != "error", frame
        if frame["type"] == "conversation.message" and frame["message"]["role"] == role:
            return frame["message"]


async def test_message_create_with_files_is_heard_with_them_in_order(conversation, owner):
    first = await sync_to_async(file_make)(owner, b"first", "one.txt")
    second = await sync_to_async(file_make)(owner, b"second", "two.txt")
    ws = await connect_as(owner, conversation.pk)
    await ws.send_json_to(
        {"type": "message.create", "content": "", "attachments": [str(second.id), str(first.id)]}
    )
    message = await heard(ws)
    assert [a["filename"] for a in message["attachments"]] == ["two.txt", "one.txt"]
    await ws.disconnect()


async def test_message_create_with_another_users_file_is_refused(conversation, owner, outsider):
    theirs = await sync_to_async(file_make)(outsider, b"theirs", "theirs.txt")
    ws = await connect_as(owner, conversation.pk)
    await ws.send_json_to(
        {"type": "message.create", "content": "x", "attachments": [str(theirs.id)]}
    )
    error = await ws.receive_json_from(timeout=5)
    assert (error["type"], error["code"]) == ("error", "not_found")
    await ws.disconnect()

    def counts() -> tuple[int, int, int]:
        return (
            Message.objects.filter(conversation=conversation).count(),
            Run.objects.filter(conversation=conversation).count(),
            Attachment.objects.count(),
        )

    assert await sync_to_async(counts)() == (0, 0, 0)


async def test_message_edit_carries_its_files(conversation, owner):
    file = await sync_to_async(file_make)(owner, b"new", "new.txt")
    ws = await connect_as(owner, conversation.pk)
    await ws.send_json_to({"type": "message.create", "content": "v1"})
    sent = await heard(ws)  # stored with its run, in one transaction
    await ws.send_json_to({"type": "run.cancel"})
    await receive_until(ws, "run.cancelled")
    await ws.send_json_to(
        {
            "type": "message.edit",
            "message_id": sent["id"],
            "content": "",
            "attachments": [str(file.id)],
        }
    )
    edited = await heard(ws)
    assert edited["id"] != sent["id"]
    assert [a["id"] for a in edited["attachments"]] == [str(file.id)]
    await ws.disconnect()
