"""The websocket's authorization matrix: every kind of caller against the socket itself,
every frame type against what belongs to someone else, and every frame type from the
owner and from a credential that lapsed after the socket opened.

Callers: the owner by session and by key, another user by session and by key, the owner's
revoked key, an inactive user's key, a session without an Origin, and nobody. Someone
else's conversation and an unknown one look the same (4404); no credential is 4401, and
so is a credential that no longer holds (revoked, inactive, password changed, expired).
"""

import uuid
from datetime import timedelta
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.contrib.auth.hashers import make_password
from django.contrib.sessions.models import Session
from django.utils import timezone

from accounts import services as account_services
from accounts.models import ApiKey, User
from conversations import services
from conversations.engine import eventlog
from conversations.models import Conversation, Message, Run
from conversations.serializers import run_payload
from tests.support.sockets import (
    HOST,
    ORIGIN,
    assert_closed_with,
    receive_until,
    session_cookie,
    socket,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("redis_url")]


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
    writer = eventlog.EventWriter.open(str(run.pk))
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


# --- every frame type against every credential ------------------------------------------
#
# A socket whose credential lapsed after it opened (the key revoked, the user deactivated,
# the password changed, the session expired) gets 4401 for any frame and nothing is done,
# even when no notice reached it: each lapse below is a bare UPDATE, which sends none.

FRAME_TYPES = ["message.create", "draft.update", "run.cancel", "subscribe", "ping"]


def frame_of(kind: str, stored_run: Run) -> dict[str, Any]:
    frames: dict[str, dict[str, Any]] = {
        "message.create": {"type": "message.create", "content": "still here?"},
        "draft.update": {"type": "draft.update", "draft": "changed"},
        "run.cancel": {"type": "run.cancel"},
        "subscribe": {"type": "subscribe", "run_id": str(stored_run.pk), "after": -1},
        "ping": {"type": "ping"},
    }
    return frames[kind]


def runs_of(conversation: Conversation, *, with_active: bool) -> tuple[Run, Run | None]:
    """A finished run with its event log (to subscribe to), and an active one (to
    cancel) when the frame is run.cancel."""
    stored = Run.objects.create(conversation=conversation, status="completed")
    writer = eventlog.EventWriter.open(str(stored.pk))
    writer.emit("run.created", run=run_payload(stored))
    writer.emit("run.completed", run=run_payload(stored))
    active = Run.objects.create(conversation=conversation) if with_active else None
    return stored, active


def session_headers(user: User) -> list[tuple[bytes, bytes]]:
    return [ORIGIN, HOST, (b"cookie", session_cookie(user))]


def key_headers(user: User) -> list[tuple[bytes, bytes]]:
    _, secret = account_services.api_key_create(owner=user, name="matrix")
    return [(b"authorization", f"Bearer {secret}".encode())]


def revoke_keys_silently(user: User) -> None:
    ApiKey.objects.filter(owner=user).update(revoked_at=timezone.now())


def deactivate_silently(user: User) -> None:
    User.objects.filter(pk=user.pk).update(is_active=False)


def change_password_silently(user: User) -> None:
    User.objects.filter(pk=user.pk).update(password=make_password("another-pw-123"))


def expire_sessions_silently(user: User) -> None:
    Session.objects.update(expire_date=timezone.now() - timedelta(minutes=1))


LAPSES = {
    "revoked_key": (key_headers, revoke_keys_silently),
    "inactive_user_key": (key_headers, deactivate_silently),
    "inactive_user_session": (session_headers, deactivate_silently),
    "password_changed_session": (session_headers, change_password_silently),
    "expired_session": (session_headers, expire_sessions_silently),
}


async def opened(conversation: Conversation, headers: list[tuple[bytes, bytes]]) -> Any:
    ws = socket(conversation.pk, *headers)
    assert (await ws.connect())[0]
    assert (await ws.receive_json_from(timeout=5))["type"] == "conversation.connected"
    return ws


@pytest.mark.parametrize("kind", FRAME_TYPES)
@pytest.mark.parametrize("lapse", list(LAPSES))
async def test_a_lapsed_credential_gets_4401_for_every_frame_and_nothing_is_done(
    conversation, owner, kind, lapse
):
    headers_of, end = LAPSES[lapse]
    stored, active = await sync_to_async(runs_of)(conversation, with_active=kind == "run.cancel")
    ws = await opened(conversation, await sync_to_async(headers_of)(owner))
    await sync_to_async(end)(owner)
    await ws.send_json_to(frame_of(kind, stored))
    # The close is the very next thing sent: no pong, no event of the run, no error.
    assert await ws.receive_output(timeout=5) == {"type": "websocket.close", "code": 4401}

    def state() -> tuple[str, int, int, Any]:
        fresh = Conversation.objects.get(pk=conversation.pk)
        cancel = Run.objects.get(pk=active.pk).cancel_requested_at if active else None
        return (
            fresh.draft,
            Message.objects.filter(conversation=fresh).count(),
            fresh.runs.count(),
            cancel,
        )

    assert await sync_to_async(state)() == ("", 0, 2 if active else 1, None)


@pytest.mark.parametrize("kind", FRAME_TYPES)
@pytest.mark.parametrize("caller", ["owner_session", "owner_key"])
async def test_the_owner_may_send_every_frame(conversation, owner, kind, caller):
    headers_of = session_headers if caller == "owner_session" else key_headers
    stored, active = await sync_to_async(runs_of)(conversation, with_active=kind == "run.cancel")
    ws = await opened(conversation, await sync_to_async(headers_of)(owner))
    await ws.send_json_to(frame_of(kind, stored))
    await ws.send_json_to({"type": "ping"})
    seen = [frame["type"] for frame in await receive_until(ws, "pong")]
    assert "error" not in seen
    await ws.disconnect()

    def state() -> tuple[str, int, Any]:
        fresh = Conversation.objects.get(pk=conversation.pk)
        cancel = Run.objects.get(pk=active.pk).cancel_requested_at if active else None
        return fresh.draft, Message.objects.filter(conversation=fresh).count(), cancel

    draft, messages, cancel = await sync_to_async(state)()
    assert draft == ("changed" if kind == "draft.update" else "")
    assert messages == (1 if kind == "message.create" else 0)
    assert (cancel is not None) is (kind == "run.cancel")
    if kind == "subscribe":
        assert seen[:2] == ["run.created", "run.completed"]
