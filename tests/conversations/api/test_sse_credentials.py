"""GET /api/v1/runs/<id>/events/ follows its credential as a websocket does: every way a
credential ends closes the stream within a moment, with keep-alives (and so the regular
checks) far apart; the streams of the user's other credentials, and of other users, stay
open."""

import asyncio
import time
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.contrib.sessions.backends.db import SessionStore
from django.test import AsyncClient

from accounts import services as account_services
from accounts.models import User
from conversations.engine import eventlog
from conversations.models import Run
from conversations.serializers import run_payload
from tests.support.sse import live_run, logged_in, sse_events

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("redis_url", "close_thread_connections"),
]

# Well within the keep-alive interval: only a notice (or the expiry) can end a stream so soon.
PROMPTLY = 3.0


@pytest.fixture(autouse=True)
def keep_alives_far_apart(settings: Any) -> None:
    settings.PARLEY_STREAM_KEEPALIVE_SECONDS = 60


class Stream:
    """An open event stream, read in the background."""

    def __init__(self, reading: "asyncio.Future[list[dict[str, Any]]]") -> None:
        self.reading = reading

    @classmethod
    async def open(cls, client: AsyncClient, run: Run, **headers: str) -> "Stream":
        response = await client.get(f"/api/v1/runs/{run.pk}/events/", headers=headers)
        assert response.status_code == 200
        stream = cls(asyncio.ensure_future(sse_events(response)))
        await asyncio.sleep(0.3)  # it has begun to follow, and goes on
        assert not stream.reading.done()
        return stream

    async def ended(self, *, within: float = PROMPTLY) -> list[str]:
        """The types of the events it sent, once it has ended (else the wait fails)."""
        return [event["type"] for event in await asyncio.wait_for(self.reading, within)]


async def key_stream(owner: User, run: Run, name: str = "k") -> tuple[Any, Stream]:
    key, secret = await sync_to_async(account_services.api_key_create)(owner=owner, name=name)
    return key, await Stream.open(AsyncClient(), run, Authorization=f"Bearer {secret}")


async def session_stream(owner: User, run: Run) -> tuple[AsyncClient, Stream]:
    client = await logged_in(owner)
    return client, await Stream.open(client, run)


def session_key(client: AsyncClient) -> str:
    return client.cookies["sessionid"].value


async def finish(run: Run) -> None:
    def write() -> None:
        writer = eventlog.EventWriter(str(run.pk), next_sequence=1)
        writer.emit("run.completed", run=run_payload(run) | {"status": "completed"})

    await sync_to_async(write)()


async def test_a_key_revoked_over_the_api_ends_its_stream_at_once(conversation, owner):
    run = await sync_to_async(live_run)(conversation)
    key, stream = await key_stream(owner, run)
    manager = await logged_in(owner)

    revoked = await manager.delete(f"/api/v1/api-keys/{key.pk}/")
    begun = time.monotonic()

    assert revoked.status_code in (200, 204)
    assert await stream.ended() == ["run.created"]
    assert time.monotonic() - begun < PROMPTLY


async def test_deactivating_the_user_ends_their_key_and_session_streams(conversation, owner):
    run = await sync_to_async(live_run)(conversation)
    _, by_key = await key_stream(owner, run)
    _, by_session = await session_stream(owner, run)

    owner.is_active = False
    await owner.asave(update_fields=["is_active"])

    assert await by_key.ended() == ["run.created"]
    assert await by_session.ended() == ["run.created"]


async def test_deleting_the_user_ends_their_key_stream(conversation, owner):
    run = await sync_to_async(live_run)(conversation)
    _, stream = await key_stream(owner, run)

    await User.objects.filter(pk=owner.pk).adelete()

    # Their conversations go with them: the run's end may come first, or the close.
    assert (await stream.ended())[0] == "run.created"


async def test_a_password_change_ends_the_sessions_stream(conversation, owner):
    run = await sync_to_async(live_run)(conversation)
    _, stream = await session_stream(owner, run)

    owner.set_password("a-new-password-456")
    await owner.asave()

    assert await stream.ended() == ["run.created"]


@pytest.mark.parametrize("how", ["logged out", "flushed"])
async def test_a_session_ended_ends_its_stream(conversation, owner, how):
    run = await sync_to_async(live_run)(conversation)
    client, stream = await session_stream(owner, run)

    if how == "logged out":
        await client.alogout()
    else:  # gone from the store without a log-out (an admin, a clean-up, a shell)
        await sync_to_async(SessionStore(session_key(client)).delete)()

    assert await stream.ended() == ["run.created"]
    again = await client.get(f"/api/v1/runs/{run.pk}/events/")
    assert again.status_code == 401


async def test_a_session_expiring_ends_its_stream_when_it_expires(conversation, owner):
    run = await sync_to_async(live_run)(conversation)
    client = await logged_in(owner)

    def expire_soon() -> None:
        session = SessionStore(session_key(client))
        session.set_expiry(1)
        session.save()

    await sync_to_async(expire_soon)()
    begun = time.monotonic()
    stream = await Stream.open(client, run)

    assert await stream.ended(within=5) == ["run.created"]
    assert 0.8 < time.monotonic() - begun < 1 + PROMPTLY


async def test_the_users_other_credentials_and_other_users_keep_their_streams(
    conversation, owner, outsider
):
    run = await sync_to_async(live_run)(conversation)
    _, kept_key = await key_stream(owner, run, "kept")
    _, kept_session = await session_stream(owner, run)
    other_key, _ = await sync_to_async(account_services.api_key_create)(owner=owner, name="gone")
    other_session = await logged_in(owner)
    outsiders_key, _ = await sync_to_async(account_services.api_key_create)(
        owner=outsider, name="theirs"
    )

    await sync_to_async(account_services.api_key_revoke)(api_key=other_key)
    await other_session.alogout()
    await sync_to_async(account_services.api_key_revoke)(api_key=outsiders_key)
    outsider.is_active = False
    await outsider.asave(update_fields=["is_active"])
    await asyncio.sleep(1)

    assert not kept_key.reading.done()
    assert not kept_session.reading.done()
    await finish(run)
    assert await kept_key.ended() == ["run.created", "run.completed"]
    assert await kept_session.ended() == ["run.created", "run.completed"]
