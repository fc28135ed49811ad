"""Branches over the conversation websocket: the message.regenerate, message.edit and
branch.switch frames, what the socket and the other sockets of the conversation hear, and
the refusals (error frames; the socket stays open and nothing is stored)."""

import json
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator

from accounts.models import ApiKey
from conversations import services
from conversations.models import Branch, Conversation, Message, Run
from tests.support.fake_openai import FakeOpenAI, Script
from tests.support.sockets import assert_closed, assert_open, connect_as, key_socket
from tests.support.steps import run_to_end

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("redis_url")]

UNKNOWN = "00000000-0000-4000-8000-000000000000"


def two_turns(conversation: Conversation) -> dict[str, str]:
    """u1 a2 u3 a4 on the root branch; their ids by name, and the root's."""
    rows = services.messages_append(
        conversation=conversation,
        messages=[
            services.NewMessage(role="user", content="What is a cat?"),
            services.NewMessage(role="assistant", content="A small feline."),
            services.NewMessage(role="user", content="And a dog?"),
            services.NewMessage(role="assistant", content="A loyal canine."),
        ],
    )
    conversation.refresh_from_db()
    ids = {name: str(row.pk) for name, row in zip(["u1", "a2", "u3", "a4"], rows, strict=True)}
    return {**ids, "root": str(conversation.active_branch_id)}


@pytest.fixture
async def ids(conversation) -> dict[str, str]:
    return await sync_to_async(two_turns)(conversation)


def stored(conversation: Conversation) -> tuple[int, int, int, str]:
    """Messages, branches, runs and the active branch: unchanged by a refused frame."""
    conversation.refresh_from_db()
    return (
        Message.objects.filter(conversation=conversation).count(),
        Branch.objects.filter(conversation=conversation).count(),
        Run.objects.filter(conversation=conversation).count(),
        str(conversation.active_branch_id),
    )


async def receive_all(ws: WebsocketCommunicator, *kinds: str) -> dict[str, dict[str, Any]]:
    """Frames until one of each kind has come (in whatever order); the first of each."""
    seen: dict[str, dict[str, Any]] = {}
    while not set(kinds) <= set(seen):
        frame = await ws.receive_json_from(timeout=5)
        assert frame["type"] != "error", frame
        seen.setdefault(frame["type"], frame)
    return seen


async def receive_matching(ws: WebsocketCommunicator, kind: str, **fields: Any) -> dict[str, Any]:
    """The first frame of `kind` with these fields, skipping others (earlier notices)."""
    while True:
        frame = await ws.receive_json_from(timeout=5)
        assert frame["type"] != "error", frame
        if frame["type"] == kind and all(frame.get(k) == v for k, v in fields.items()):
            return frame


def fill(frame: dict[str, Any], ids: dict[str, str]) -> str:
    """The frame as text, each "{name}" value replaced by that id."""
    return json.dumps(
        {
            key: ids[value[1:-1]] if isinstance(value, str) and value[1:-1] in ids else value
            for key, value in frame.items()
        }
    )


# --- the frames -----------------------------------------------------------------------------


async def test_regenerate_starts_a_run_on_a_new_branch_and_streams_it(conversation, owner, ids):
    ws = await connect_as(owner, conversation.pk)
    await ws.send_json_to({"type": "message.regenerate", "message_id": ids["a4"]})

    seen = await receive_all(
        ws, "run.created", "conversation.branch_created", "conversation.updated"
    )
    branch = seen["conversation.branch_created"]["branch"]
    assert (branch["parent_id"], branch["fork_seq"], branch["message_count"]) == (
        ids["root"],
        3,
        3,
    )
    assert seen["conversation.updated"]["active_branch_id"] == branch["id"]
    run = seen["run.created"]["run"]
    assert (run["branch_id"], run["trigger_message_id"]) == (branch["id"], ids["u3"])
    assert seen["run.created"]["sequence_number"] == 0
    assert await sync_to_async(stored)(conversation) == (4, 2, 1, branch["id"])
    await ws.disconnect()


async def test_edit_stores_the_new_text_first_on_a_new_branch(conversation, owner, ids):
    ws = await connect_as(owner, conversation.pk)
    await ws.send_json_to(
        {"type": "message.edit", "message_id": ids["u3"], "content": "And a wolf?"}
    )

    seen = await receive_all(ws, "run.created", "conversation.message", "conversation.updated")
    message = seen["conversation.message"]["message"]
    branch_id = seen["conversation.updated"]["active_branch_id"]
    assert (message["content"], message["seq"], message["branch_id"]) == (
        "And a wolf?",
        3,
        branch_id,
    )
    assert message["alternatives"] == {
        "index": 1,
        "count": 2,
        "branch_ids": [ids["root"], branch_id],
    }
    assert seen["run.created"]["run"]["trigger_message_id"] == message["id"]
    await ws.disconnect()


async def test_a_repeated_client_id_starts_no_second_run(conversation, owner, ids):
    frame = {"type": "message.regenerate", "message_id": ids["a4"], "client_id": "r-1"}
    ws = await connect_as(owner, conversation.pk)
    await ws.send_json_to(frame)
    first = (await receive_all(ws, "run.created"))["run.created"]
    await ws.send_json_to({"type": "run.cancel"})
    await receive_all(ws, "run.cancelled")

    await ws.send_json_to(frame)  # the same run again: its events, no error
    await ws.send_json_to({"type": "ping"})
    await receive_all(ws, "pong")
    assert await sync_to_async(stored)(conversation) == (4, 2, 1, first["run"]["branch_id"])
    await ws.disconnect()


async def test_branch_switch_changes_the_active_branch(conversation, owner, ids):
    ws = await connect_as(owner, conversation.pk)
    await ws.send_json_to({"type": "message.regenerate", "message_id": ids["a2"]})
    new = (await receive_all(ws, "conversation.branch_created"))["conversation.branch_created"]
    await ws.send_json_to({"type": "run.cancel"})
    await receive_all(ws, "run.cancelled")

    await ws.send_json_to({"type": "branch.switch", "branch_id": ids["root"]})
    await receive_matching(ws, "conversation.updated", active_branch_id=ids["root"])
    assert (await sync_to_async(stored)(conversation))[3] == ids["root"]

    # Already shown: the socket is still told where it stands.
    await ws.send_json_to({"type": "branch.switch", "branch_id": ids["root"]})
    again = await receive_matching(ws, "conversation.updated")
    assert again == {
        "type": "conversation.updated",
        "conversation_id": str(conversation.pk),
        "active_branch_id": ids["root"],
    }
    await ws.send_json_to({"type": "branch.switch", "branch_id": new["branch"]["id"]})
    await receive_matching(ws, "conversation.updated", active_branch_id=new["branch"]["id"])
    assert (await sync_to_async(stored)(conversation))[3] == new["branch"]["id"]
    await ws.disconnect()


async def test_other_sockets_hear_the_new_branch_the_switch_and_the_run(conversation, owner, ids):
    first = await connect_as(owner, conversation.pk)
    second = await connect_as(owner, conversation.pk)

    await first.send_json_to({"type": "message.edit", "message_id": ids["u1"], "content": "Hi"})
    seen = await receive_all(
        second,
        "conversation.branch_created",
        "conversation.updated",
        "conversation.message",
        "conversation.run_started",
        "run.created",  # the other socket follows the run too
    )
    branch = seen["conversation.branch_created"]["branch"]
    assert (branch["parent_id"], branch["fork_seq"]) == (ids["root"], 0)
    assert seen["conversation.updated"]["active_branch_id"] == branch["id"]
    assert seen["conversation.message"]["message"]["content"] == "Hi"

    await first.send_json_to({"type": "run.cancel"})
    await receive_all(second, "run.cancelled")
    await first.send_json_to({"type": "branch.switch", "branch_id": ids["root"]})
    await receive_matching(second, "conversation.updated", active_branch_id=ids["root"])
    await first.disconnect()
    await second.disconnect()


async def test_the_regenerated_reply_streams_with_its_alternatives(
    conversation, owner, ids, upstream: FakeOpenAI, enqueued
):
    upstream.push(Script(text="A domesticated wolf."))
    ws = await connect_as(owner, conversation.pk)
    await ws.send_json_to({"type": "message.regenerate", "message_id": ids["a4"]})
    run = (await receive_all(ws, "run.created"))["run.created"]["run"]

    await sync_to_async(run_to_end)(run["id"], enqueued)
    seen = await receive_all(ws, "message.completed", "run.completed")
    reply = seen["message.completed"]["message"]
    assert (reply["content"], reply["seq"], reply["branch_id"]) == (
        "A domesticated wolf.",
        4,
        run["branch_id"],
    )
    assert reply["alternatives"] == {
        "index": 1,
        "count": 2,
        "branch_ids": [ids["root"], run["branch_id"]],
    }
    assert seen["run.completed"]["run"]["branch_id"] == run["branch_id"]
    await ws.disconnect()


# --- refusals ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("frame", "code"),
    [
        ({"type": "message.regenerate"}, "invalid"),
        ({"type": "message.regenerate", "message_id": 5}, "invalid"),
        ({"type": "message.regenerate", "message_id": "{a4}", "client_id": 5}, "invalid"),
        ({"type": "message.regenerate", "message_id": "nope"}, "not_found"),
        ({"type": "message.regenerate", "message_id": UNKNOWN}, "not_found"),
        ({"type": "message.regenerate", "message_id": "{u3}"}, "invalid"),
        ({"type": "message.regenerate", "message_id": "{a4}", "client_id": "x" * 101}, "invalid"),
        ({"type": "message.edit", "message_id": "{u3}"}, "invalid"),
        ({"type": "message.edit", "message_id": "{u3}", "content": 5}, "invalid"),
        ({"type": "message.edit", "content": "Hi"}, "invalid"),
        ({"type": "message.edit", "message_id": "{u3}", "content": "   "}, "invalid"),
        ({"type": "message.edit", "message_id": "{u3}", "content": "x" * 11}, "invalid"),
        ({"type": "message.edit", "message_id": "{a4}", "content": "Hi"}, "invalid"),
        ({"type": "message.edit", "message_id": UNKNOWN, "content": "Hi"}, "not_found"),
        ({"type": "branch.switch"}, "invalid"),
        ({"type": "branch.switch", "branch_id": 5}, "invalid"),
        ({"type": "branch.switch", "branch_id": UNKNOWN}, "not_found"),
        ({"type": "branch.switch", "branch_id": "nope"}, "not_found"),
    ],
)
async def test_a_refused_frame_gets_an_error_stores_nothing_and_the_socket_stays_open(
    conversation, owner, ids, frame, code, settings
):
    settings.PARLEY_MAX_MESSAGE_CHARS = 10
    before = await sync_to_async(stored)(conversation)
    ws = await connect_as(owner, conversation.pk)
    await ws.send_to(text_data=fill(frame, ids))
    error = await ws.receive_json_from(timeout=5)
    assert (error["type"], error["code"]) == ("error", code), error
    assert error["message"]
    await assert_open(ws)
    assert await sync_to_async(stored)(conversation) == before
    await ws.disconnect()


def foreign_ids(owner, outsider) -> list[dict[str, str]]:
    """Message and branch ids of the user's own other conversation and of someone else's."""
    found = []
    for user in (owner, outsider):
        other = services.conversation_create(owner=user, title="Elsewhere")
        found.append(two_turns(other))
    return found


async def test_ids_of_another_conversation_are_not_found(conversation, owner, outsider, ids):
    before = await sync_to_async(stored)(conversation)
    ws = await connect_as(owner, conversation.pk)
    for other in await sync_to_async(foreign_ids)(owner, outsider):
        for frame in [
            {"type": "message.regenerate", "message_id": other["a4"]},
            {"type": "message.edit", "message_id": other["u3"], "content": "Hi"},
            {"type": "branch.switch", "branch_id": other["root"]},
        ]:
            await ws.send_json_to(frame)
            error = await ws.receive_json_from(timeout=5)
            assert (error["type"], error["code"]) == ("error", "not_found"), frame
            assert "Elsewhere" not in json.dumps(error)
    await assert_open(ws)
    assert await sync_to_async(stored)(conversation) == before
    await ws.disconnect()


async def test_while_a_run_is_active_the_frames_are_refused(conversation, owner, ids):
    ws = await connect_as(owner, conversation.pk)
    await ws.send_json_to({"type": "message.regenerate", "message_id": ids["a2"]})
    new = (await receive_all(ws, "run.created"))["run.created"]["run"]["branch_id"]
    before = await sync_to_async(stored)(conversation)

    for frame in [
        {"type": "message.regenerate", "message_id": ids["a4"]},
        {"type": "message.edit", "message_id": ids["u3"], "content": "Hi"},
        {"type": "branch.switch", "branch_id": ids["root"]},
    ]:
        await ws.send_json_to(frame)
        frames: list[dict[str, Any]] = []
        while not frames or frames[-1]["type"] != "error":
            frames.append(await ws.receive_json_from(timeout=5))
        assert frames[-1]["code"] == "run_active", frame
    await ws.send_json_to({"type": "ping"})
    await receive_matching(ws, "pong")  # past the regeneration's notices: still open
    assert await sync_to_async(stored)(conversation) == before
    assert before[3] == new
    await ws.disconnect()


@pytest.mark.parametrize(
    "frame",
    [
        {"type": "message.regenerate", "message_id": "{a4}"},
        {"type": "message.edit", "message_id": "{u3}", "content": "Hi"},
        {"type": "branch.switch", "branch_id": "{root}"},
    ],
    ids=lambda frame: frame["type"],
)
async def test_a_frame_after_a_silent_revocation_does_nothing(conversation, owner, ids, frame):
    regenerated = await sync_to_async(Branch.objects.create)(
        conversation=conversation, parent_id=ids["root"], fork_seq=1, message_count=1
    )
    await sync_to_async(Conversation.objects.filter(pk=conversation.pk).update)(
        active_branch=regenerated
    )
    before = await sync_to_async(stored)(conversation)
    ws, key = await key_socket(owner, conversation.pk)
    await sync_to_async(ApiKey.objects.filter(pk=key.pk).update)(revoked_at="2026-01-01T00:00Z")
    await ws.send_to(text_data=fill(frame, ids))
    await assert_closed(ws)
    assert await sync_to_async(stored)(conversation) == before


async def test_regenerate_past_the_daily_message_quota_is_refused_and_stores_nothing(
    conversation, owner, ids, settings
):
    settings.PARLEY_MAX_MESSAGES_PER_DAY = 1
    await sync_to_async(services.user_message_append)(conversation=conversation, content="One")
    before = await sync_to_async(stored)(conversation)
    ws = await connect_as(owner, conversation.pk)
    await ws.send_json_to({"type": "message.regenerate", "message_id": ids["a4"]})
    error = await ws.receive_json_from(timeout=5)
    assert (error["type"], error["code"]) == ("error", "message_quota_exceeded"), error
    await assert_open(ws)
    assert await sync_to_async(stored)(conversation) == before
    await ws.disconnect()
