"""The websocket's authorization matrix: every kind of caller against the socket itself,
and every frame type against what belongs to someone else.

Callers: the owner by session and by key, another user by session and by key, the owner's
revoked key, an inactive user's key, a session without an Origin, and nobody. Someone
else's conversation and an unknown one look the same (4404); no credential is 4401.
"""

import uuid
from typing import Any

import pytest
from asgiref.sync import sync_to_async

from accounts import services as account_services
from accounts.models import User
from conversations import events, services
from conversations.models import Conversation, Message, Run
from conversations.payloads import run_payload
from tests.conversations.test_consumers import (
    HOST,
    ORIGIN,
    assert_closed_with,
    close_thread_connections,
    session_cookie,
    socket,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("redis_url")]

__all__ = ["close_thread_connections"]  # the autouse fixture, shared


def credentials(owner: User, outsider: User) -> dict[str, list[tuple[bytes, bytes]]]:
    def key(user: User, *, revoked: bool = False) -> list[tuple[bytes, bytes]]:
        api_key, secret = account_services.api_key_create(owner=user, name="matrix")
        if revoked:
            account_services.api_key_revoke(api_key=api_key)
        return [(b"authorization", f"Bearer {secret}".encode())]

    inactive = User.objects.create_user(username="gone", password="pw-gone-123")
    inactive_key = key(inactive)
    inactive.is_active = False
    inactive.save()
    return {
        "owner_session": [ORIGIN, HOST, (b"cookie", session_cookie(owner))],
        "owner_key": key(owner),
        "other_session": [ORIGIN, HOST, (b"cookie", session_cookie(outsider))],
        "other_key": key(outsider),
        "revoked_key": key(owner, revoked=True),
        "inactive_key": inactive_key,
        "session_without_origin": [(b"cookie", session_cookie(owner))],
        "anonymous": [],
    }


EXPECTED_CLOSE = {
    "owner_session": None,
    "owner_key": None,
    "other_session": 4404,
    "other_key": 4404,
    "revoked_key": 4401,
    "inactive_key": 4401,
    "session_without_origin": 4401,
    "anonymous": 4401,
}


async def test_who_may_open_a_socket_on_a_conversation(conversation, owner, outsider):
    table = await sync_to_async(credentials)(owner, outsider)
    unknown = uuid.uuid4()
    for caller, headers in table.items():
        expected = EXPECTED_CLOSE[caller]
        ws = socket(conversation.pk, *headers)
        if expected is None:
            connected, _ = await ws.connect()
            assert connected, caller
            hello = await ws.receive_json_from(timeout=5)
            assert hello["type"] == "conversation.connected", caller
            await ws.disconnect()
        else:
            await assert_closed_with(ws, expected)
        # An unknown conversation answers as someone else's does: no existence leak.
        await assert_closed_with(socket(unknown, *headers), expected or 4404)


def theirs(outsider: User) -> tuple[Conversation, Run]:
    conversation = services.conversation_create(owner=outsider, title="Theirs")
    run = Run.objects.create(conversation=conversation, status="completed")
    writer = events.EventWriter.open(str(run.pk))
    writer.emit("run.created", run=run_payload(run))
    writer.emit("run.completed", run=run_payload(run))
    return conversation, run


@pytest.mark.parametrize("caller", ["owner_session", "owner_key"])
async def test_no_frame_reaches_another_users_conversation_or_run(
    conversation, owner, outsider, caller
):
    table = await sync_to_async(credentials)(owner, outsider)
    their_conversation, their_run = await sync_to_async(theirs)(outsider)
    ws = socket(conversation.pk, *table[caller])
    assert (await ws.connect())[0]
    assert (await ws.receive_json_from(timeout=5))["type"] == "conversation.connected"
    frames: list[tuple[dict[str, Any], str]] = [
        ({"type": "subscribe", "run_id": str(their_run.pk)}, "not_found"),
        ({"type": "subscribe", "run_id": str(their_run.pk), "after": 0}, "not_found"),
        ({"type": "run.cancel"}, "no_active_run"),
    ]
    for frame, code in frames:
        await ws.send_json_to(frame)
        answer = await ws.receive_json_from(timeout=5)
        assert (answer["type"], answer.get("code")) == ("error", code), frame
    # A resume URL naming their run is refused the same way.
    resumed = socket(conversation.pk, *table[caller], query=f"?run_id={their_run.pk}&after=0")
    assert (await resumed.connect())[0]
    assert (await resumed.receive_json_from(timeout=5))["type"] == "conversation.connected"
    assert (await resumed.receive_json_from(timeout=5))["code"] == "not_found"
    await resumed.disconnect()
    # Frames that write act on the socket's own conversation only.
    await ws.send_json_to({"type": "draft.update", "draft": "mine"})
    await ws.receive_json_from(timeout=5)
    await ws.disconnect()

    def drafts() -> tuple[str, str, int]:
        return (
            Conversation.objects.get(pk=conversation.pk).draft,
            Conversation.objects.get(pk=their_conversation.pk).draft,
            Message.objects.filter(conversation=their_conversation).count(),
        )

    assert await sync_to_async(drafts)() == ("mine", "", 0)
