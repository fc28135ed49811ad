"""An open socket follows the credential that opened it: revoking the key, deactivating
or deleting the user, changing the password or logging out closes it (4401) within a
second, and only the sockets of that credential."""

from typing import Any

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import Permission
from django.test import Client
from rest_framework.test import APIClient

from accounts import services as account_services
from accounts.models import ApiKey, User
from conversations.models import Conversation, Message
from tests.conversations.test_consumers import HOST, ORIGIN, close_thread_connections, socket

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("redis_url")]

__all__ = ["close_thread_connections"]  # the autouse fixture, shared

WITHIN = 1.0  # seconds a socket may stay open after its credential ended


async def open_socket(conversation_id: Any, *headers: tuple[bytes, bytes]) -> WebsocketCommunicator:
    ws = socket(conversation_id, *headers)
    connected, _ = await ws.connect()
    assert connected
    assert (await ws.receive_json_from(timeout=5))["type"] == "conversation.connected"
    return ws


async def key_socket(user: User, conversation_id: Any) -> tuple[WebsocketCommunicator, ApiKey]:
    key, secret = await sync_to_async(account_services.api_key_create)(owner=user, name="bot")
    ws = await open_socket(conversation_id, (b"authorization", f"Bearer {secret}".encode()))
    return ws, key


def logged_in(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


async def session_socket(client: Client, conversation_id: Any) -> WebsocketCommunicator:
    cookie = f"sessionid={client.cookies['sessionid'].value}".encode()
    return await open_socket(conversation_id, ORIGIN, HOST, (b"cookie", cookie))


async def assert_closed(ws: WebsocketCommunicator) -> None:
    message = await ws.receive_output(timeout=WITHIN)
    assert message == {"type": "websocket.close", "code": 4401}


async def assert_open(ws: WebsocketCommunicator) -> None:
    await ws.send_json_to({"type": "ping"})
    assert await ws.receive_json_from(timeout=5) == {"type": "pong"}


def revoke_over_rest(user: User, key: ApiKey) -> None:
    client = APIClient()
    client.force_authenticate(user)
    assert client.delete(f"/api/v1/api-keys/{key.pk}/").status_code == 204


def revoke_in_the_web_ui(user: User, key: ApiKey) -> None:
    response = logged_in(user).post(f"/accounts/api-keys/{key.pk}/revoke/")
    assert response.status_code == 302


def revoke_in_the_admin(user: User, key: ApiKey) -> None:
    admin = User.objects.create_user(username="admin", password="pw", is_staff=True)
    admin.user_permissions.set(
        Permission.objects.filter(codename__in=["change_apikey", "view_apikey"])
    )
    response = logged_in(admin).post(
        "/admin/accounts/apikey/", {"action": "revoke_keys", "_selected_action": [str(key.pk)]}
    )
    assert response.status_code == 302
    assert ApiKey.objects.get(pk=key.pk).revoked_at is not None


@pytest.mark.parametrize(
    "revoke",
    [revoke_over_rest, revoke_in_the_web_ui, revoke_in_the_admin],
    ids=["rest", "web", "admin"],
)
async def test_revoking_a_key_closes_its_sockets_and_no_other(conversation, owner, revoke):
    ws, key = await key_socket(owner, conversation.pk)
    other, _ = await key_socket(owner, conversation.pk)
    await sync_to_async(revoke)(owner, key)
    await assert_closed(ws)
    await assert_open(other)
    await other.disconnect()


def deactivate(user: User) -> None:
    user.is_active = False
    user.save()


def delete(user: User) -> None:
    User.objects.filter(pk=user.pk).delete()


def change_password_elsewhere(user: User) -> None:
    user.set_password("a-new-password-123")
    user.save()


@pytest.mark.parametrize(
    "end",
    [deactivate, delete, change_password_elsewhere],
    ids=["deactivated", "deleted", "password"],
)
async def test_ending_a_user_or_their_password_closes_session_sockets(conversation, owner, end):
    session = await session_socket(await sync_to_async(logged_in)(owner), conversation.pk)
    await sync_to_async(end)(owner)
    await assert_closed(session)


@pytest.mark.parametrize("end", [deactivate, delete], ids=["deactivated", "deleted"])
async def test_ending_a_user_closes_key_sockets(conversation, owner, end):
    ws, _ = await key_socket(owner, conversation.pk)
    await sync_to_async(end)(owner)
    await assert_closed(ws)


async def test_a_password_change_page_closes_the_other_sessions_sockets(conversation, owner):
    here = await sync_to_async(logged_in)(owner)
    elsewhere = await session_socket(await sync_to_async(logged_in)(owner), conversation.pk)
    response = await sync_to_async(here.post)(
        "/accounts/password/",
        {
            "old_password": "pw-alice-123",
            "new_password1": "a-much-newer-pw-456",
            "new_password2": "a-much-newer-pw-456",
        },
    )
    assert response.status_code == 302
    await assert_closed(elsewhere)
    # The page that changed it keeps its session, and can open a socket again.
    again = await session_socket(here, conversation.pk)
    await assert_open(again)
    await again.disconnect()


async def test_logging_out_closes_that_sessions_sockets_only(conversation, owner):
    leaving = await sync_to_async(logged_in)(owner)
    staying = await sync_to_async(logged_in)(owner)
    leaving_ws = await session_socket(leaving, conversation.pk)
    staying_ws = await session_socket(staying, conversation.pk)
    key_ws, _ = await key_socket(owner, conversation.pk)
    response = await sync_to_async(leaving.post)("/accounts/logout/")
    assert response.status_code == 302
    await assert_closed(leaving_ws)
    await assert_open(staying_ws)
    await assert_open(key_ws)
    await staying_ws.disconnect()
    await key_ws.disconnect()


@pytest.mark.parametrize(
    "frame",
    [
        {"type": "message.create", "content": "still here?"},
        {"type": "draft.update", "draft": "changed"},
        {"type": "run.cancel"},
        {"type": "subscribe", "run_id": "00000000-0000-0000-0000-000000000000"},
    ],
    ids=lambda frame: frame["type"],
)
async def test_a_frame_after_a_silent_revocation_does_nothing(conversation, owner, frame):
    # Revoked without any notice to the sockets (a bulk UPDATE): the frame checks itself.
    ws, key = await key_socket(owner, conversation.pk)
    await sync_to_async(ApiKey.objects.filter(pk=key.pk).update)(revoked_at="2026-01-01T00:00Z")
    await ws.send_json_to(frame)
    await assert_closed(ws)
    stored = await sync_to_async(Conversation.objects.get)(pk=conversation.pk)
    assert stored.draft == ""
    assert await sync_to_async(Message.objects.filter(conversation=conversation).count)() == 0
