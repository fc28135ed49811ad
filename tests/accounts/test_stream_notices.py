"""HTTP streams hear their user's credential notices (accounts.stream_notices) through one
channel per event loop: every stream of the user hears each notice, no stream of another
user does, and the loop's channel leaves a user's group with the user's last stream."""

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer

from accounts import services as account_services
from accounts.sockets import user_sockets_group, user_sockets_recheck
from accounts.stream_notices import credential_notices_listen

# Notices go out after commit: the tests commit.
pytestmark = pytest.mark.django_db(transaction=True)


class Heard:
    def __init__(self) -> None:
        self.count = 0
        self.event = asyncio.Event()

    def __call__(self) -> None:
        self.count += 1
        self.event.set()


async def notice(user_id: int) -> None:
    await sync_to_async(user_sockets_recheck)(user_id=user_id)


async def settled() -> None:
    for _ in range(5):
        await asyncio.sleep(0.01)


@pytest.fixture
def group_calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """The group joins and leaves the layer is asked for, whichever layer is in use."""
    layer = get_channel_layer()
    assert layer is not None
    calls: list[tuple[str, str]] = []
    for name in ("group_add", "group_discard"):
        real = getattr(layer, name)

        async def spy(group: str, channel: str, real: Any = real, name: str = name) -> None:
            calls.append((name, group))
            await real(group, channel)

        monkeypatch.setattr(layer, name, spy, raising=False)
    return calls


async def test_every_stream_of_the_user_hears_a_notice_and_no_other_users_does(owner, outsider):
    first, second, other = Heard(), Heard(), Heard()
    async with contextlib.AsyncExitStack() as streams:
        for user, heard in ((owner, first), (owner, second), (outsider, other)):
            await streams.enter_async_context(
                credential_notices_listen(user_id=user.pk, on_notice=heard)
            )

        await notice(owner.pk)
        await asyncio.wait_for(asyncio.gather(first.event.wait(), second.event.wait()), 3)
        await settled()

        assert (first.count, second.count, other.count) == (1, 1, 0)


async def test_a_key_revoked_is_heard(owner):
    key, _ = await sync_to_async(account_services.api_key_create)(owner=owner, name="k")
    heard = Heard()
    async with credential_notices_listen(user_id=owner.pk, on_notice=heard):
        await sync_to_async(account_services.api_key_revoke)(api_key=key)
        await asyncio.wait_for(heard.event.wait(), 3)


async def test_the_loop_joins_a_users_group_once_and_leaves_with_the_last_stream(
    owner, group_calls
):
    group = user_sockets_group(owner.pk)
    async with contextlib.AsyncExitStack() as streams:
        for _ in range(3):
            await streams.enter_async_context(
                credential_notices_listen(user_id=owner.pk, on_notice=Heard())
            )
        assert group_calls == [("group_add", group)]  # once for the loop, not per stream
    await settled()
    assert group_calls == [("group_add", group), ("group_discard", group)]


async def test_a_stream_gone_hears_nothing_more(owner):
    gone, staying = Heard(), Heard()
    async with credential_notices_listen(user_id=owner.pk, on_notice=staying):
        async with credential_notices_listen(user_id=owner.pk, on_notice=gone):
            pass
        await notice(owner.pk)
        await asyncio.wait_for(staying.event.wait(), 3)
        await settled()
    assert gone.count == 0


async def test_other_messages_to_the_users_sockets_are_not_notices(owner):
    heard = Heard()
    async with credential_notices_listen(user_id=owner.pk, on_notice=heard):
        layer = get_channel_layer()
        assert layer is not None
        body = {"type": "conversations.deleted", "conversation_ids": []}
        await layer.group_send(
            user_sockets_group(owner.pk), {"type": "conversation.notify", "body": body}
        )
        await notice(owner.pk)  # then a notice: it is the only thing heard
        await asyncio.wait_for(heard.event.wait(), 3)
        await settled()
    assert heard.count == 1


async def test_one_streams_trouble_does_not_deafen_the_others(owner):
    def broken() -> None:
        raise RuntimeError("a stream gone wrong")

    heard = Heard()
    hearers: list[Callable[[], None]] = [broken, heard]
    async with contextlib.AsyncExitStack() as streams:
        for hearer in hearers:
            await streams.enter_async_context(
                credential_notices_listen(user_id=owner.pk, on_notice=hearer)
            )
        await notice(owner.pk)
        await asyncio.wait_for(heard.event.wait(), 3)
        heard.event.clear()
        await notice(owner.pk)  # and the channel still listens
        await asyncio.wait_for(heard.event.wait(), 3)
