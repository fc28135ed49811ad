"""An open socket follows the credential that opened it: revoking the key, deactivating
or deleting the user, changing the password or logging out closes it (4401) within a
second, and only the sockets of that credential."""

from typing import Any

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import Permission
from django.contrib.sessions.backends.db import SessionStore
from django.contrib.sessions.models import Session
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from accounts import services as account_services
from accounts.models import ApiKey, User
from conversations import consumers, services
from conversations.models import Conversation, Message
from tests.support.sockets import (
    HOST,
    ORIGIN,
    WITHIN,
    assert_closed,
    assert_open,
    key_socket,
    open_socket,
    socket,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("redis_url")]


def logged_in(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


async def session_socket(client: Client, conversation_id: Any) -> WebsocketCommunicator:
    cookie = f"sessionid={client.cookies['sessionid'].value}".encode()
    return await open_socket(conversation_id, ORIGIN, HOST, (b"cookie", cookie))


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


NOWHERE = "00000000-0000-0000-0000-000000000000"

# One frame of each type a client may send; the test below fails when a type is added
# to the consumer without a line here.
EVERY_FRAME = [
    {"type": "message.create", "content": "still here?"},
    {"type": "message.regenerate", "message_id": NOWHERE},
    {"type": "message.edit", "message_id": NOWHERE, "content": "changed"},
    {"type": "branch.switch", "message_id": NOWHERE},
    {"type": "run.cancel"},
    {"type": "subscribe", "run_id": NOWHERE},
    {"type": "draft.update", "draft": "changed"},
    {"type": "ping"},
]


def test_every_frame_type_is_tried_after_a_revocation():
    handled = set(consumers.ConversationConsumer()._handlers())
    assert {frame["type"] for frame in EVERY_FRAME} == handled


@pytest.mark.parametrize("frame", EVERY_FRAME, ids=lambda frame: frame["type"])
async def test_a_frame_after_a_silent_revocation_does_nothing(conversation, owner, frame):
    # Revoked without any notice to the sockets (a bulk UPDATE): the frame checks itself,
    # a ping included, and gets no answer but the close.
    ws, key = await key_socket(owner, conversation.pk)
    await sync_to_async(ApiKey.objects.filter(pk=key.pk).update)(revoked_at="2026-01-01T00:00Z")
    await ws.send_json_to(frame)
    # Nothing answered (no pong, no error that would tell a revoked key about the
    # conversation): the close is the next thing the client receives.
    assert await ws.receive_output(timeout=WITHIN) == {"type": "websocket.close", "code": 4401}
    stored = await sync_to_async(Conversation.objects.get)(pk=conversation.pk)
    assert stored.draft == ""
    assert await sync_to_async(Message.objects.filter(conversation=conversation).count)() == 0


def superuser_client() -> Client:
    admin = User.objects.create_superuser(username="root", password="pw-root-123")
    return logged_in(admin)


def change_password_in_the_admin(user: User) -> None:
    response = superuser_client().post(
        f"/admin/accounts/user/{user.pk}/password/",
        {
            "usable_password": "true",
            "password1": "An-admin-set-pw-789",
            "password2": "An-admin-set-pw-789",
        },
    )
    assert response.status_code == 302


def deactivate_in_the_admin(user: User) -> None:
    joined = user.date_joined
    response = superuser_client().post(
        f"/admin/accounts/user/{user.pk}/change/",
        {
            "username": user.username,
            "date_joined_0": joined.strftime("%Y-%m-%d"),
            "date_joined_1": joined.strftime("%H:%M:%S"),
            # is_active left out: the box unticked
        },
    )
    assert response.status_code == 302, response.content[:2000]
    assert not User.objects.get(pk=user.pk).is_active


def delete_in_the_admin(user: User) -> None:
    response = superuser_client().post(f"/admin/accounts/user/{user.pk}/delete/", {"post": "yes"})
    assert response.status_code == 302
    assert not User.objects.filter(pk=user.pk).exists()


@pytest.mark.parametrize(
    "end",
    [change_password_in_the_admin, deactivate_in_the_admin, delete_in_the_admin],
    ids=["password", "deactivated", "deleted"],
)
async def test_the_admins_user_pages_close_the_users_sockets_and_no_one_elses(
    conversation, owner, outsider, end
):
    session = await session_socket(await sync_to_async(logged_in)(owner), conversation.pk)
    theirs = await sync_to_async(services.conversation_create)(owner=outsider, title="Theirs")
    bystander, _ = await key_socket(outsider, theirs.pk)
    await sync_to_async(end)(owner)
    await assert_closed(session)
    await assert_open(bystander)
    await bystander.disconnect()


async def test_a_password_change_leaves_the_users_key_sockets_open(conversation, owner):
    session = await session_socket(await sync_to_async(logged_in)(owner), conversation.pk)
    key_ws, _ = await key_socket(owner, conversation.pk)
    await sync_to_async(change_password_elsewhere)(owner)
    await assert_closed(session)
    await assert_open(key_ws)
    await key_ws.disconnect()


def flush_session(client: Client) -> None:
    SessionStore(client.cookies["sessionid"].value).delete()


def delete_session_row(client: Client) -> None:
    Session.objects.filter(session_key=client.cookies["sessionid"].value).delete()


@pytest.mark.parametrize("end", [flush_session, delete_session_row], ids=["flushed", "deleted"])
async def test_a_session_ended_without_logging_out_closes_its_sockets_only(
    conversation, owner, end
):
    ending = await sync_to_async(logged_in)(owner)
    ending_ws = await session_socket(ending, conversation.pk)
    staying_ws = await session_socket(await sync_to_async(logged_in)(owner), conversation.pk)
    await sync_to_async(end)(ending)
    await assert_closed(ending_ws)
    await assert_open(staying_ws)
    await staying_ws.disconnect()


def expiring_in(client: Client, seconds: int) -> None:
    store = SessionStore(client.cookies["sessionid"].value)
    store.set_expiry(seconds)
    store.save()


async def test_a_session_that_expires_closes_its_socket_when_it_does(conversation, owner):
    client = await sync_to_async(logged_in)(owner)
    await sync_to_async(expiring_in)(client, 2)
    ws = await session_socket(client, conversation.pk)
    await assert_open(ws)  # still valid for a moment
    await assert_closed(ws, within=2 + WITHIN)


async def test_a_lost_notice_is_made_up_for_by_the_periodic_check(conversation, owner, settings):
    settings.PARLEY_WS_CREDENTIAL_RECHECK_SECONDS = 0.3
    ws, key = await key_socket(owner, conversation.pk)
    # Revoked without any notice to the sockets, and no frame sent.
    await sync_to_async(ApiKey.objects.filter(pk=key.pk).update)(revoked_at=timezone.now())
    await assert_closed(ws)


async def test_a_revocation_while_the_socket_is_connecting_is_not_missed(
    conversation, owner, monkeypatch
):
    key, secret = await sync_to_async(account_services.api_key_create)(owner=owner, name="bot")
    real_get = consumers._conversation_get

    async def revoked_meanwhile(user: Any, conversation_id: Any) -> Any:
        # After the handshake authenticated the key, before the socket joined its group.
        await sync_to_async(account_services.api_key_revoke)(api_key=key)
        return await real_get(user, conversation_id)

    monkeypatch.setattr(consumers, "_conversation_get", revoked_meanwhile)
    ws = socket(conversation.pk, (b"authorization", f"Bearer {secret}".encode()))
    assert (await ws.connect())[0]
    assert await ws.receive_output(timeout=5) == {"type": "websocket.close", "code": 4401}
