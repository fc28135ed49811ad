"""The conversation websocket, driven with Channels' communicator against real Redis."""

import asyncio
import json
from typing import Any

import pytest
import redis
from asgiref.sync import sync_to_async

from accounts import services as account_services
from accounts.websocket import origin_allowed
from conversations import services
from conversations.engine import eventlog
from conversations.engine.eventlog import follow as follow_module
from conversations.models import Conversation, Run
from conversations.serializers import run_payload
from tests.support.sockets import (
    HOST,
    ORIGIN,
    assert_closed_with,
    connect_as,
    receive_until,
    session_cookie,
    socket,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("redis_url")]

# --- who may connect ------------------------------------------------------------------


async def test_anonymous_socket_is_closed_4401(conversation):
    await assert_closed_with(socket(conversation.pk, ORIGIN, HOST), 4401)


async def test_another_users_conversation_is_closed_4404(conversation, outsider):
    cookie = await sync_to_async(session_cookie)(outsider)
    await assert_closed_with(socket(conversation.pk, ORIGIN, HOST, (b"cookie", cookie)), 4404)


async def test_unknown_conversation_is_closed_4404(owner):
    cookie = await sync_to_async(session_cookie)(owner)
    unknown = "00000000-0000-4000-8000-000000000000"
    await assert_closed_with(socket(unknown, ORIGIN, HOST, (b"cookie", cookie)), 4404)


@pytest.mark.parametrize("origin", [b"https://evil.example", b"null"], ids=["foreign", "null"])
async def test_a_cookie_socket_from_a_foreign_origin_is_refused(conversation, owner, origin):
    cookie = await sync_to_async(session_cookie)(owner)
    connected, _ = await socket(conversation.pk, (b"cookie", cookie), (b"origin", origin)).connect()
    assert connected is False


async def test_a_cookie_without_an_origin_is_not_consulted(conversation, owner):
    # Only a program omits the Origin; it must present a key, not a cookie.
    cookie = await sync_to_async(session_cookie)(owner)
    await assert_closed_with(socket(conversation.pk, (b"cookie", cookie)), 4401)


async def test_a_program_without_credentials_is_closed_4401(conversation):
    await assert_closed_with(socket(conversation.pk), 4401)


@pytest.mark.parametrize(
    ("origin", "host", "scheme", "allowed"),
    [
        ("http://localhost:8000", "localhost:8000", "ws", True),
        ("http://127.0.0.1:8000", "127.0.0.1:8000", "ws", True),
        ("http://[::1]:8000", "[::1]:8000", "ws", True),
        ("https://localhost", "localhost", "wss", True),
        # Same host, another port or scheme: another origin, as CSRF sees it.
        ("http://127.0.0.1:9999", "127.0.0.1:8000", "ws", False),
        ("http://localhost:3000", "localhost:8000", "ws", False),
        ("http://localhost", "localhost", "wss", False),
        ("https://localhost:8000", "localhost:8000", "ws", False),
        # The Host itself must be allowed.
        ("http://evil.example", "evil.example", "ws", False),
        ("https://evil.example", "localhost:8000", "ws", False),
        ("http://localhost.evil.example", "localhost:8000", "ws", False),
        ("null", "localhost:8000", "ws", False),
        ("javascript://localhost", "localhost:8000", "ws", False),
        ("", "localhost:8000", "ws", False),
        ("http://localhost:8000", "", "ws", False),
    ],
)
def test_origins_are_compared_as_csrf_does(settings, origin, host, scheme, allowed):
    settings.ALLOWED_HOSTS = ["localhost", "127.0.0.1", "[::1]"]
    settings.CSRF_TRUSTED_ORIGINS = []
    scope = {"scheme": scheme, "headers": [(b"host", host.encode())]}
    assert origin_allowed(origin, scope) is allowed


@pytest.mark.parametrize(
    ("origin", "allowed"),
    [
        ("https://chat.example.org", True),
        ("https://a.apps.example.org", True),
        ("http://a.apps.example.org", False),
        ("https://apps.example.org.evil.example", False),
        ("http://chat.example.org", False),
    ],
)
def test_trusted_origins_and_their_wildcards(settings, origin, allowed):
    settings.CSRF_TRUSTED_ORIGINS = ["https://chat.example.org", "https://*.apps.example.org"]
    scope = {"scheme": "ws", "headers": [(b"host", b"localhost:8000")]}
    assert origin_allowed(origin, scope) is allowed


def test_behind_a_tls_proxy_the_forwarded_scheme_counts(settings):
    settings.SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    headers = [(b"host", b"localhost"), (b"x-forwarded-proto", b"https")]
    assert origin_allowed("https://localhost", {"scheme": "ws", "headers": headers})
    assert not origin_allowed("http://localhost", {"scheme": "ws", "headers": headers})


@pytest.mark.parametrize("origin", [b"http://localhost:3000", b"https://localhost:8000"])
async def test_a_cookie_socket_from_another_port_or_scheme_is_refused(conversation, owner, origin):
    cookie = await sync_to_async(session_cookie)(owner)
    ws = socket(conversation.pk, (b"cookie", cookie), (b"origin", origin), HOST)
    connected, _ = await ws.connect()
    assert connected is False


async def test_an_api_key_socket_needs_no_origin(conversation, owner):
    _, secret = await sync_to_async(account_services.api_key_create)(owner=owner, name="bot")
    ws = socket(conversation.pk, (b"authorization", f"Bearer {secret}".encode()))
    connected, _ = await ws.connect()
    assert connected
    assert (await ws.receive_json_from())["type"] == "conversation.connected"
    await ws.disconnect()


async def test_another_users_api_key_gets_4404(conversation, outsider):
    _, secret = await sync_to_async(account_services.api_key_create)(owner=outsider, name="x")
    ws = socket(conversation.pk, (b"authorization", f"Bearer {secret}".encode()))
    await assert_closed_with(ws, 4404)


async def test_a_revoked_api_key_gets_4401(conversation, owner):
    key, secret = await sync_to_async(account_services.api_key_create)(owner=owner, name="x")
    await sync_to_async(account_services.api_key_revoke)(api_key=key)
    ws = socket(conversation.pk, (b"authorization", f"Bearer {secret}".encode()))
    await assert_closed_with(ws, 4401)


# --- bad frames keep the socket open ------------------------------------------------


@pytest.mark.parametrize(
    ("frame", "code"),
    [
        ("not json", "invalid_json"),
        ("[1, 2]", "invalid"),
        ('{"type": 5}', "invalid"),
        ('{"type": "dance"}', "invalid"),
        ('{"type": "message.create"}', "invalid"),
        ('{"type": "message.create", "content": 42}', "invalid"),
        ('{"type": "message.create", "content": "   "}', "invalid"),
        ('{"type": "subscribe", "run_id": "nope"}', "not_found"),
        ('{"type": "subscribe"}', "invalid"),
        ('{"type": "subscribe", "run_id": "x", "after": "3"}', "invalid"),
        ('{"type": "subscribe", "run_id": "x", "after": -5}', "invalid"),
        ('{"type": "draft.update"}', "invalid"),
        ('{"type": "run.cancel"}', "no_active_run"),
        # Frames that used to close the socket with 1011.
        ('{"type": "ping", "x": ' + "[" * 100_000 + "]" * 100_000 + "}", "invalid_json"),
        ('{"type": "message.create", "content": "hi", "client_id": "\\ud800"}', "invalid_json"),
        ('{"type": "message.create", "content": "a\\u0000b"}', "invalid_json"),
        ('{"type": "draft.update", "draft": "\\udfff"}', "invalid_json"),
        ('{"type": "subscribe", "run_id": "x", "after": 1e400}', "invalid_json"),
        ('{"type": "subscribe", "run_id": "x", "after": NaN}', "invalid_json"),
        ('{"\\ud800": 1, "type": "ping"}', "invalid_json"),
    ],
)
async def test_a_bad_frame_gets_an_error_and_the_socket_stays_open(
    conversation, owner, frame, code
):
    ws = await connect_as(owner, conversation.pk)
    await ws.send_to(text_data=frame)
    error = await ws.receive_json_from(timeout=5)
    assert error["type"] == "error"
    assert error["code"] == code
    assert error["message"]
    await ws.send_json_to({"type": "ping"})
    assert await ws.receive_json_from() == {"type": "pong"}
    await ws.disconnect()


@pytest.mark.parametrize(
    "frame",
    [
        '{"type": "message.create", "content": "hi", "client_id": "a\\udc00b"}',
        '{"type": "message.create", "content": "hi\\ud83d"}',
        '{"type": "message.create", "content": "hi", "extra": {"k\\u0000": 1}}',
        '{"type": "message.create", "content": "hi", "x": ' + "[" * 65 + "]" * 65 + "}",
        '{"type": "message.create", "content": "hi", "n": 123456789012345678901234}',
        '{"type": "message.create", "content": "hi", "n": -Infinity}',
        '{"type": "draft.update", "draft": "d\\u0000"}',
        '{"type": "draft.update", "draft": "ok", "x": ' + '{"a":' * 3000 + "1" + "}" * 3000 + "}",
    ],
)
async def test_a_frame_with_json_no_database_holds_stores_nothing(conversation, owner, frame):
    ws = await connect_as(owner, conversation.pk)
    await ws.send_to(text_data=frame)
    error = await ws.receive_json_from(timeout=5)
    assert (error["type"], error["code"]) == ("error", "invalid_json")
    await ws.send_json_to({"type": "ping"})
    assert await ws.receive_json_from() == {"type": "pong"}
    await ws.disconnect()

    def stored() -> tuple[int, int, str]:
        conversation.refresh_from_db()
        return conversation.messages.count(), conversation.runs.count(), conversation.draft

    assert await sync_to_async(stored)() == (0, 0, "")


async def test_oversize_and_binary_frames_are_refused(conversation, owner, settings):
    settings.PARLEY_WS_MAX_FRAME_BYTES = 1000
    ws = await connect_as(owner, conversation.pk)
    await ws.send_to(text_data=json.dumps({"type": "message.create", "content": "x" * 2000}))
    assert (await ws.receive_json_from())["code"] == "request_too_large"
    await ws.send_to(bytes_data=b"\x00\x01")
    assert (await ws.receive_json_from())["code"] == "invalid_json"
    assert await sync_to_async(lambda: conversation.messages.count())() == 0
    await ws.disconnect()


# --- frames that do things --------------------------------------------------------------


async def test_message_create_starts_a_run_and_streams_its_events(conversation, owner):
    ws = await connect_as(owner, conversation.pk)
    await ws.send_json_to({"type": "message.create", "content": "Hello there"})

    frames = await receive_until(ws, "run.created")
    run = await sync_to_async(Run.objects.get)(conversation=conversation)
    assert frames[-1]["run_id"] == str(run.pk)
    assert frames[-1]["sequence_number"] == 0
    assert run.status == Run.Status.QUEUED  # no worker in this test
    await ws.disconnect()


async def test_a_message_resent_with_its_client_id_starts_no_second_run(conversation, owner):
    # A client that lost its socket right after sending cannot know whether the message
    # arrived; it resends with the same client_id, after the first reply has even ended.
    frame = {"type": "message.create", "content": "Once", "client_id": "c-1"}
    ws = await connect_as(owner, conversation.pk)
    await ws.send_json_to(frame)
    await receive_until(ws, "run.created")
    await ws.send_json_to({"type": "run.cancel"})
    await receive_until(ws, "run.cancelled")
    await ws.disconnect()

    again = await connect_as(owner, conversation.pk)
    await again.send_json_to(frame)
    replayed = await receive_until(again, "run.cancelled")  # the first run, not a new one
    run = await sync_to_async(Run.objects.get)(conversation=conversation)
    assert {f["run_id"] for f in replayed if "run_id" in f} == {str(run.pk)}
    assert "error" not in [f["type"] for f in replayed]
    assert await sync_to_async(conversation.messages.count)() == 1

    await again.send_json_to({**frame, "client_id": "c-2"})  # a new id is a new message
    await receive_until(again, "run.created")
    assert await sync_to_async(Run.objects.filter(conversation=conversation).count)() == 2
    await again.disconnect()


async def test_a_second_message_while_a_run_is_active_is_refused(conversation, owner):
    ws = await connect_as(owner, conversation.pk)
    await ws.send_json_to({"type": "message.create", "content": "first"})
    await receive_until(ws, "run.created")
    await ws.send_json_to({"type": "message.create", "content": "second"})
    frames = await receive_until(ws, "error")
    assert frames[-1]["code"] == "run_active"
    assert await sync_to_async(conversation.messages.count)() == 1
    await ws.disconnect()


async def test_a_message_over_the_daily_quota_gets_an_error_frame(conversation, owner, settings):
    settings.PARLEY_MAX_MESSAGES_PER_DAY = 1
    await sync_to_async(services.user_message_append)(conversation=conversation, content="one")
    ws = await connect_as(owner, conversation.pk)
    await ws.send_json_to({"type": "message.create", "content": "two"})
    error = await ws.receive_json_from(timeout=5)
    assert error["type"] == "error"
    assert error["code"] == "message_quota_exceeded"
    assert "maximum of 1 messages" in error["message"]
    assert await sync_to_async(conversation.messages.count)() == 1
    assert not await sync_to_async(Run.objects.exists)()
    await ws.send_json_to({"type": "ping"})  # the socket stays open
    assert await ws.receive_json_from() == {"type": "pong"}
    await ws.disconnect()


async def test_run_cancel_ends_the_active_run(conversation, owner):
    ws = await connect_as(owner, conversation.pk)
    await ws.send_json_to({"type": "message.create", "content": "Hi"})
    await receive_until(ws, "run.created")
    await ws.send_json_to({"type": "run.cancel"})
    frames = await receive_until(ws, "run.cancelled")
    assert frames[-1]["run"]["status"] == "cancelled"
    await ws.disconnect()


def write_log(run: Run, *, finished: bool) -> list[dict[str, Any]]:
    writer = eventlog.EventWriter.open(str(run.pk), coalesce_ms=0)
    writer.emit("run.created", run=run_payload(run))
    writer.emit("message.created", message_id="m1", role="assistant", attempt=1)
    for word in ["Once ", "upon ", "a ", "time"]:
        writer.message_delta("m1", word)
    writer.flush()
    if finished:
        writer.emit("run.completed", run=run_payload(run))
    return eventlog.events_all(str(run.pk))


def run_create(conversation: Conversation, **fields: Any) -> Run:
    return Run.objects.create(conversation=conversation, **fields)


async def test_subscribe_after_n_replays_exactly_the_events_after_n(conversation, owner):
    run = await sync_to_async(run_create)(conversation, status="completed")
    log = await sync_to_async(write_log)(run, finished=True)
    ws = await connect_as(owner, conversation.pk)

    await ws.send_json_to({"type": "subscribe", "run_id": str(run.pk), "after": 2})
    frames = await receive_until(ws, "run.completed")

    assert frames == log[3:]
    await ws.disconnect()


async def test_connecting_mid_reply_replays_the_reply_so_far(conversation, owner):
    run = await sync_to_async(run_create)(conversation, status="in_progress")
    log = await sync_to_async(write_log)(run, finished=False)
    ws = await connect_as(owner, conversation.pk)

    replay = [await ws.receive_json_from(timeout=5) for _ in log]
    assert replay == log
    assert eventlog.message_texts(replay) == {"m1": "Once upon a time"}
    await ws.disconnect()


async def test_reconnecting_with_a_resume_point_sends_exactly_what_follows(conversation, owner):
    run = await sync_to_async(run_create)(conversation, status="completed")
    log = await sync_to_async(write_log)(run, finished=True)
    ws = await connect_as(owner, conversation.pk, query=f"?run_id={run.pk}&after=2")

    assert await receive_until(ws, "run.completed") == log[3:]
    await ws.disconnect()


async def test_an_unusable_resume_point_replays_the_whole_run(conversation, owner):
    run = await sync_to_async(run_create)(conversation, status="completed")
    log = await sync_to_async(write_log)(run, finished=True)
    ws = await connect_as(owner, conversation.pk, query=f"?run_id={run.pk}&after=-5")

    assert await receive_until(ws, "run.completed") == log
    await ws.disconnect()


async def test_resuming_an_unknown_run_says_so(conversation, owner):
    unknown = "00000000-0000-4000-8000-000000000000"
    ws = await connect_as(owner, conversation.pk, query=f"?run_id={unknown}&after=3")
    assert (await ws.receive_json_from())["code"] == "not_found"
    await ws.send_json_to({"type": "ping"})  # still open
    assert await ws.receive_json_from() == {"type": "pong"}
    await ws.disconnect()


async def test_an_ended_run_whose_log_expired_says_so_instead_of_waiting(conversation, owner):
    run = await sync_to_async(run_create)(conversation, status="completed")
    ws = await connect_as(owner, conversation.pk)  # no log was ever written: as if expired

    await ws.send_json_to({"type": "subscribe", "run_id": str(run.pk), "after": 2})
    error = await ws.receive_json_from(timeout=5)
    assert (error["type"], error["code"]) == ("error", "events_expired")
    assert "messages" in error["message"]
    await ws.disconnect()

    resumed = await connect_as(owner, conversation.pk, query=f"?run_id={run.pk}&after=2")
    assert (await resumed.receive_json_from(timeout=5))["code"] == "events_expired"
    await resumed.disconnect()


def flaky_follow(*, sends: list[int]) -> tuple[Any, list[int | None]]:
    """The follower's read, whose Redis connection drops after `sends[i]` events on call i
    (calls past the list work); returns it and the `after` of every call."""
    real, calls = follow_module.events_follow, []

    async def follow(run_id: str, *, after: int | None = None, **options: Any) -> Any:
        calls.append(after)
        budget = sends[len(calls) - 1] if len(calls) <= len(sends) else None
        async for event in real(run_id, after=after, **options):
            if budget is not None and budget == 0:
                raise redis.ConnectionError("Connection reset by peer")
            yield event
            budget = None if budget is None else budget - 1
        if budget is not None:
            raise redis.ConnectionError("Connection reset by peer")

    return follow, calls


async def test_a_redis_failure_while_following_is_retried_without_gap_or_duplicate(
    conversation, owner, monkeypatch
):
    run = await sync_to_async(run_create)(conversation, status="completed")
    log = await sync_to_async(write_log)(run, finished=True)
    follow, calls = flaky_follow(sends=[2, 2])
    monkeypatch.setattr(follow_module, "events_follow", follow)
    monkeypatch.setattr(follow_module, "RETRY_DELAYS", (0.01,))
    ws = await connect_as(owner, conversation.pk)

    await ws.send_json_to({"type": "subscribe", "run_id": str(run.pk)})

    assert await receive_until(ws, "run.completed") == log
    assert calls == [None, 1, 3]  # each retry picks up after the last event sent
    await ws.disconnect()


async def test_a_lasting_redis_failure_tells_the_client_where_to_resume(
    conversation, owner, monkeypatch
):
    run = await sync_to_async(run_create)(conversation, status="completed")
    log = await sync_to_async(write_log)(run, finished=True)
    follow, calls = flaky_follow(sends=[3, 0, 0, 0])
    monkeypatch.setattr(follow_module, "events_follow", follow)
    monkeypatch.setattr(follow_module, "RETRY_DELAYS", (0.01, 0.01))
    ws = await connect_as(owner, conversation.pk)

    await ws.send_json_to({"type": "subscribe", "run_id": str(run.pk)})
    frames = await receive_until(ws, "error")

    assert frames[:-1] == log[:3]
    assert frames[-1]["code"] == "stream_unavailable"
    assert (frames[-1]["run_id"], frames[-1]["after"]) == (str(run.pk), 2)
    assert calls == [None, 2, 2]  # the first try and two retries, then it gave up
    await ws.send_json_to({"type": "ping"})
    assert await ws.receive_json_from() == {"type": "pong"}
    await ws.disconnect()


async def test_a_real_redis_restart_mid_reply_is_ridden_out(
    conversation, owner, event_log_redis, monkeypatch
):
    """The event log's server restarts (its data gone) while a reply streams: the socket
    carries on from the last event it sent and gets what the worker writes next, once."""
    monkeypatch.setattr(follow_module, "RETRY_DELAYS", (0.1, 0.2, 0.4, 0.8, 1.6, 3.2))
    run = await sync_to_async(run_create)(conversation, status="in_progress")
    log = await sync_to_async(write_log)(run, finished=False)
    ws = await connect_as(owner, conversation.pk)
    replay = [await ws.receive_json_from(timeout=5) for _ in log]
    assert replay == log

    await asyncio.to_thread(event_log_redis.restart, down_seconds=1)

    def write_on() -> None:
        writer = eventlog.EventWriter(str(run.pk), next_sequence=len(log), coalesce_ms=0)
        writer.message_delta("m1", " there was a restart.")
        writer.emit("run.completed", run=run_payload(run))

    await sync_to_async(write_on)()
    rest = await receive_until(ws, "run.completed", timeout=20)
    assert [frame["sequence_number"] for frame in replay + rest] == list(range(len(log) + 2))
    assert eventlog.message_texts(replay + rest) == {"m1": "Once upon a time there was a restart."}
    await ws.disconnect()


async def test_another_conversations_run_cannot_be_subscribed(conversation, owner):
    other = await sync_to_async(services.conversation_create)(owner=owner)
    run = await sync_to_async(run_create)(other, status="completed")
    ws = await connect_as(owner, conversation.pk)
    await ws.send_json_to({"type": "subscribe", "run_id": str(run.pk)})
    assert (await ws.receive_json_from())["code"] == "not_found"
    await ws.disconnect()


async def test_a_second_tab_sees_draft_edits_and_new_runs(conversation, owner):
    first = await connect_as(owner, conversation.pk)
    second = await connect_as(owner, conversation.pk)

    await first.send_json_to({"type": "draft.update", "draft": "A cat in a hat"})
    frames = await receive_until(second, "conversation.draft_updated")
    assert frames[-1]["draft"] == "A cat in a hat"
    assert frames[-1]["by"] == "user"
    await conversation.arefresh_from_db()
    assert (conversation.draft, conversation.draft_edited) == ("A cat in a hat", True)

    await first.send_json_to({"type": "message.create", "content": "Draw it"})
    frames = await receive_until(second, "run.created")
    assert "conversation.run_started" in [f["type"] for f in frames]
    await first.disconnect()
    await second.disconnect()


async def test_deleting_the_conversation_closes_its_sockets(conversation, owner):
    conversation_id = str(conversation.pk)
    ws = await connect_as(owner, conversation_id)
    await sync_to_async(services.conversation_delete)(conversation=conversation)
    frames = await receive_until(ws, "conversation.deleted")
    assert frames[-1]["conversation_id"] == conversation_id
    assert await ws.receive_output(timeout=5) == {"type": "websocket.close", "code": 4404}


async def test_an_idle_socket_still_receives_notifications(conversation, owner):
    # Regression: the channel layer's wait for messages once timed out after 5 idle
    # seconds and dropped the socket.
    first = await connect_as(owner, conversation.pk)
    second = await connect_as(owner, conversation.pk)
    await asyncio.sleep(7)

    await first.send_json_to({"type": "draft.update", "draft": "Still here"})
    frames = await receive_until(second, "conversation.draft_updated")
    assert frames[-1]["draft"] == "Still here"
    await second.send_json_to({"type": "ping"})
    assert (await receive_until(second, "pong"))[-1]["type"] == "pong"
    await first.disconnect()
    await second.disconnect()


async def test_other_tabs_hear_of_ended_runs_new_titles_and_context_events(conversation, owner):
    first = await connect_as(owner, conversation.pk)
    second = await connect_as(owner, conversation.pk)

    await first.send_json_to({"type": "message.create", "content": "Hi"})
    await receive_until(first, "run.created")
    await first.send_json_to({"type": "run.cancel"})
    ended = (await receive_until(second, "conversation.run_ended"))[-1]
    assert ended["run"]["status"] == "cancelled"

    await sync_to_async(services.conversation_update)(conversation=conversation, title="Trip")
    assert (await receive_until(second, "conversation.updated"))[-1]["title"] == "Trip"

    await sync_to_async(services.context_event_add)(
        conversation=conversation, content="The user is now in Paris."
    )
    stored = (await receive_until(second, "conversation.message"))[-1]["message"]
    assert (stored["role"], stored["content"]) == ("system", "The user is now in Paris.")
    await first.disconnect()
    await second.disconnect()
