"""A deletion tells the owner's open sockets once, however many conversations went: the
sockets on a deleted conversation end as they always did, the others learn which
conversations are gone (the chat page drops them from its list)."""

import pytest
from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer

from accounts.sockets import user_sockets_group
from conversations import services
from conversations.models import Conversation
from tests.support.admin import staff
from tests.support.sockets import (
    connect_as,
    receive_until,
)


@pytest.mark.django_db
def test_a_bulk_delete_sends_one_notification_per_owner(
    owner, outsider, monkeypatch, django_capture_on_commit_callbacks
):
    theirs = {
        user.pk: {services.conversation_create(owner=user).pk for _ in range(30)}
        for user in (owner, outsider)
    }
    kept = services.conversation_create(owner=owner)
    moderator = staff("moderator", "delete_conversation")
    layer = get_channel_layer()
    sent = []
    group_send = layer.group_send

    async def recorded(group, message):
        sent.append((group, message))
        await group_send(group, message)

    monkeypatch.setattr(layer, "group_send", recorded)
    with django_capture_on_commit_callbacks(execute=True):
        deleted = services.conversations_delete(
            actor=moderator,
            queryset=Conversation.objects.exclude(pk=kept.pk),
        )
    assert deleted == 60
    # Two sends for 60 conversations (it was one per conversation), each to the owner's
    # sockets, naming exactly that owner's conversations.
    assert len(sent) == 2
    named = {group: message["body"] for group, message in sent}
    for user_id, ids in theirs.items():
        body = named[user_sockets_group(user_id)]
        assert body["type"] == "conversations.deleted"
        assert set(body["conversation_ids"]) == {str(pk) for pk in ids}


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("redis_url")
async def test_every_open_tab_of_the_owner_hears_of_a_bulk_delete(owner, outsider):
    open_one, other_tab, gone_too = [
        await sync_to_async(services.conversation_create)(owner=owner) for _ in range(3)
    ]
    strangers = await sync_to_async(services.conversation_create)(owner=outsider)
    on_deleted = await connect_as(owner, open_one.pk)
    on_kept = await connect_as(owner, other_tab.pk)
    on_strangers = await connect_as(outsider, strangers.pk)

    await sync_to_async(services.conversations_delete)(
        actor=None, queryset=Conversation.objects.filter(pk__in=[open_one.pk, gone_too.pk])
    )
    ids = sorted([str(open_one.pk), str(gone_too.pk)])

    # The socket on a deleted conversation: the list, then the frame it always got, then
    # the close that tells a client the conversation is gone.
    frames = await receive_until(on_deleted, "conversation.deleted")
    assert [f["type"] for f in frames] == ["conversations.deleted", "conversation.deleted"]
    assert sorted(frames[0]["conversation_ids"]) == ids
    assert frames[1]["conversation_id"] == str(open_one.pk)
    assert await on_deleted.receive_output(timeout=5) == {"type": "websocket.close", "code": 4404}

    # Another tab of the owner: the list, and it stays open.
    frames = await receive_until(on_kept, "conversations.deleted")
    assert sorted(frames[-1]["conversation_ids"]) == ids
    await on_kept.send_json_to({"type": "ping"})
    assert (await receive_until(on_kept, "pong"))[-1]["type"] == "pong"

    # Someone else's socket hears nothing.
    assert await on_strangers.receive_nothing(timeout=0.5)
    for ws in (on_kept, on_strangers):
        await ws.disconnect()
