"""GET /api/v1/runs/<id>/events/ — Server-Sent Events, with every refusal."""

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any, cast

import pytest
from asgiref.sync import sync_to_async
from django.http import StreamingHttpResponse
from django.test import AsyncClient

from accounts import services as account_services
from conversations.engine import eventlog
from conversations.engine.eventlog import follow as follow_module
from conversations.models import Run
from conversations.serializers import run_payload
from tests.support.sse import live_run, logged_in, sse_events, sse_parse

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("redis_url", "close_thread_connections"),
]


def finished_run(conversation) -> tuple[Run, list[dict[str, Any]]]:
    run = Run.objects.create(conversation=conversation, status="completed")
    writer = eventlog.EventWriter.open(str(run.pk), coalesce_ms=0)
    writer.emit("run.created", run=run_payload(run))
    writer.emit("message.created", message_id="m1", role="assistant", attempt=1)
    for word in ["Hello ", "from ", "the ", "log"]:
        writer.message_delta("m1", word)
    writer.flush()
    writer.emit("run.completed", run=run_payload(run))
    return run, eventlog.events_all(str(run.pk))


async def test_the_owner_reads_every_event_and_the_stream_ends(conversation, owner):
    run, log = await sync_to_async(finished_run)(conversation)
    client = await logged_in(owner)

    response = await client.get(f"/api/v1/runs/{run.pk}/events/")

    assert response.status_code == 200
    assert response["Content-Type"] == "text/event-stream"
    assert response["Cache-Control"] == "no-cache"
    assert await sse_events(response) == log


@pytest.mark.parametrize("how", ["query", "header"])
async def test_resume_after_a_sequence_number(conversation, owner, how):
    run, log = await sync_to_async(finished_run)(conversation)
    client = await logged_in(owner)
    url = f"/api/v1/runs/{run.pk}/events/"
    if how == "query":
        response = await client.get(url, {"after": 2})
    else:
        response = await client.get(url, headers={"Last-Event-ID": "2"})
    assert await sse_events(response) == log[3:]


async def test_last_event_id_wins_over_the_query_on_reconnect(conversation, owner):
    # EventSource opened with ?after=1 reconnects to the same URL with Last-Event-ID.
    run, log = await sync_to_async(finished_run)(conversation)
    client = await logged_in(owner)
    response = await client.get(
        f"/api/v1/runs/{run.pk}/events/", {"after": 1}, headers={"Last-Event-ID": "4"}
    )
    got = await sse_events(response)
    assert got == log[5:]
    assert got[0]["sequence_number"] == 5


async def test_an_api_key_works_without_a_session(conversation, owner):
    run, log = await sync_to_async(finished_run)(conversation)
    _, secret = await sync_to_async(account_services.api_key_create)(owner=owner, name="k")
    response = await AsyncClient().get(
        f"/api/v1/runs/{run.pk}/events/", headers={"Authorization": f"Bearer {secret}"}
    )
    assert await sse_events(response) == log


async def error_of(response) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(response.content)
    return body["error"]


async def test_anonymous_is_refused_401(conversation):
    run, _ = await sync_to_async(finished_run)(conversation)
    response = await AsyncClient().get(f"/api/v1/runs/{run.pk}/events/")
    assert response.status_code == 401
    assert (await error_of(response))["code"] == "not_authenticated"


async def test_another_user_gets_404_by_session_and_by_key(conversation, outsider):
    run, _ = await sync_to_async(finished_run)(conversation)
    client = await logged_in(outsider)
    assert (await client.get(f"/api/v1/runs/{run.pk}/events/")).status_code == 404
    _, secret = await sync_to_async(account_services.api_key_create)(owner=outsider, name="k")
    response = await AsyncClient().get(
        f"/api/v1/runs/{run.pk}/events/", headers={"Authorization": f"Bearer {secret}"}
    )
    assert response.status_code == 404
    assert (await error_of(response))["code"] == "not_found"


async def test_a_revoked_key_is_refused(conversation, owner):
    run, _ = await sync_to_async(finished_run)(conversation)
    key, secret = await sync_to_async(account_services.api_key_create)(owner=owner, name="k")
    await sync_to_async(account_services.api_key_revoke)(api_key=key)
    response = await AsyncClient().get(
        f"/api/v1/runs/{run.pk}/events/", headers={"Authorization": f"Bearer {secret}"}
    )
    assert response.status_code == 401


async def test_unknown_run_and_bad_after_and_wrong_method(conversation, owner):
    run, _ = await sync_to_async(finished_run)(conversation)
    client = await logged_in(owner)
    unknown = "00000000-0000-4000-8000-000000000000"
    assert (await client.get(f"/api/v1/runs/{unknown}/events/")).status_code == 404
    bad = await client.get(f"/api/v1/runs/{run.pk}/events/", {"after": "soon"})
    assert bad.status_code == 400
    assert (await error_of(bad))["code"] == "invalid"
    assert (await client.post(f"/api/v1/runs/{run.pk}/events/")).status_code == 405


@pytest.mark.parametrize("last_event_id", ["soon", "-2"])
async def test_a_bad_last_event_id_is_refused_400(conversation, owner, last_event_id):
    run, _ = await sync_to_async(finished_run)(conversation)
    client = await logged_in(owner)
    response = await client.get(
        f"/api/v1/runs/{run.pk}/events/", {"after": 1}, headers={"Last-Event-ID": last_event_id}
    )
    assert response.status_code == 400
    assert (await error_of(response))["code"] == "invalid"


async def expire_log(run: Run) -> None:
    await sync_to_async(eventlog.redis_client().delete)(eventlog.stream_key(run.pk))


async def test_a_finished_run_whose_log_expired_is_gone_410(conversation, owner):
    run, _ = await sync_to_async(finished_run)(conversation)
    await expire_log(run)
    client = await logged_in(owner)

    response = await client.get(f"/api/v1/runs/{run.pk}/events/")

    # Not a stream of keep-alives that never ends: a 410 also stops EventSource retrying.
    assert response.status_code == 410
    error = await error_of(response)
    assert error["code"] == "events_expired"
    assert f"/api/v1/runs/{run.pk}/" in error["message"]


async def test_another_users_expired_run_is_still_404(conversation, outsider):
    run, _ = await sync_to_async(finished_run)(conversation)
    await expire_log(run)
    client = await logged_in(outsider)
    response = await client.get(f"/api/v1/runs/{run.pk}/events/")
    assert response.status_code == 404
    assert (await error_of(response))["code"] == "not_found"


async def test_a_queued_run_without_a_log_yet_streams_once_its_worker_writes(conversation, owner):
    run = await Run.objects.acreate(conversation=conversation, status="queued")
    client = await logged_in(owner)

    got = cast(StreamingHttpResponse, await client.get(f"/api/v1/runs/{run.pk}/events/"))

    assert got.status_code == 200
    assert got.is_async
    chunks = aiter(cast(AsyncIterator[bytes], got.streaming_content))
    assert await anext(chunks) == b"retry: 2000\n\n"
    waiting = asyncio.ensure_future(anext(chunks))
    await asyncio.sleep(0.2)
    assert not waiting.done()  # following the log that is not there yet

    def worker_leases_and_finishes() -> None:
        writer = eventlog.EventWriter.open(str(run.pk), coalesce_ms=0)
        writer.emit("run.created", run=run_payload(run))
        writer.emit("run.completed", run=run_payload(run))

    await sync_to_async(worker_leases_and_finishes)()
    first = await asyncio.wait_for(waiting, timeout=10)
    rest = [chunk async for chunk in chunks]
    streamed = sse_parse((first + b"".join(rest)).decode())
    assert [event["type"] for event in streamed] == ["run.created", "run.completed"]


async def test_the_stream_is_served_asynchronously(conversation, owner):
    run, log = await sync_to_async(finished_run)(conversation)
    client = await logged_in(owner)
    response = cast(StreamingHttpResponse, await client.get(f"/api/v1/runs/{run.pk}/events/"))
    # An async iterator: waiting for events holds no worker thread.
    assert response.is_async
    assert await sse_events(response) == log


# --- ends that never came -----------------------------------------------------------------


@pytest.mark.parametrize("beyond", [0, 1, 500, 10**30])
async def test_after_at_or_past_the_terminal_event_answers_204_at_once(conversation, owner, beyond):
    run, log = await sync_to_async(finished_run)(conversation)
    after = log[-1]["sequence_number"] + beyond
    client = await logged_in(owner)
    url = f"/api/v1/runs/{run.pk}/events/"
    response = await asyncio.wait_for(client.get(url, {"after": after}), timeout=2)
    assert response.status_code == 204
    assert response.content == b""


async def test_an_eventsource_reconnecting_after_the_end_is_told_to_stop(conversation, owner):
    """An EventSource reconnects after every stream that ends, with the last id it saw:
    after the terminal event that is a 204, which ends its retries."""
    run, log = await sync_to_async(finished_run)(conversation)
    client = await logged_in(owner)
    url = f"/api/v1/runs/{run.pk}/events/"
    first = await client.get(url)
    assert [e["type"] for e in await sse_events(first)][-1] == "run.completed"
    again = await client.get(url, headers={"Last-Event-ID": str(log[-1]["sequence_number"])})
    assert again.status_code == 204
    before_the_end = await client.get(url, {"after": log[-2]["sequence_number"]})
    assert [e["type"] for e in await sse_events(before_the_end)] == ["run.completed"]


@pytest.mark.parametrize("after", [7, 10**30])
async def test_a_reader_beyond_a_live_runs_log_ends_when_the_run_does(conversation, owner, after):
    run = await sync_to_async(live_run)(conversation)
    client = await logged_in(owner)
    url = f"/api/v1/runs/{run.pk}/events/"
    response = await client.get(url, {"after": after})
    reading = asyncio.ensure_future(sse_events(response))
    await asyncio.sleep(0.3)
    assert not reading.done()

    def finish() -> None:
        eventlog.EventWriter(str(run.pk), next_sequence=1).emit(
            "run.completed", run=run_payload(run)
        )

    await sync_to_async(finish)()
    assert await asyncio.wait_for(reading, timeout=5) == []
    again = await client.get(url, {"after": after})  # as an EventSource reconnects
    assert again.status_code == 204


async def test_a_reader_past_the_end_of_a_live_run_still_gets_what_comes(conversation, owner):
    run = await sync_to_async(live_run)(conversation)
    client = await logged_in(owner)
    response = await client.get(f"/api/v1/runs/{run.pk}/events/", {"after": 0})
    reading = asyncio.ensure_future(sse_events(response))
    await asyncio.sleep(0.3)
    assert not reading.done()

    def finish() -> None:
        writer = eventlog.EventWriter(str(run.pk), next_sequence=1)
        writer.emit("run.completed", run=run_payload(run))

    await sync_to_async(finish)()
    got = await asyncio.wait_for(reading, timeout=5)
    assert [event["type"] for event in got] == ["run.completed"]


@pytest.mark.parametrize("how", ["owner", "admin", "user"])
async def test_deleting_the_conversation_ends_its_followers(conversation, owner, how):
    run = await sync_to_async(live_run)(conversation)
    client = await logged_in(owner)
    response = await client.get(f"/api/v1/runs/{run.pk}/events/")
    reading = asyncio.ensure_future(sse_events(response))
    await asyncio.sleep(0.3)

    def delete() -> None:
        from conversations import services
        from conversations.models import Conversation

        if how == "owner":
            services.conversation_delete(conversation=conversation)
        elif how == "admin":
            services.conversations_delete(
                actor=None, queryset=Conversation.objects.filter(pk=conversation.pk)
            )
        else:
            services.user_delete(actor=None, user=owner)

    await sync_to_async(delete)()
    got = await asyncio.wait_for(reading, timeout=2)
    assert [event["type"] for event in got] == ["run.created", "run.cancelled"]
    assert got[-1]["run"]["status"] == "cancelled"


async def test_a_run_deleted_without_its_end_closes_the_stream_at_the_next_keep_alive(
    conversation, owner, settings
):
    """Rows deleted behind the services' back (a shell, a database cascade) write no end
    to the log: the follower notices at its next keep-alive that the run is gone."""
    settings.PARLEY_STREAM_KEEPALIVE_SECONDS = 0.2
    run = await sync_to_async(live_run)(conversation)
    client = await logged_in(owner)
    response = await client.get(f"/api/v1/runs/{run.pk}/events/")
    reading = asyncio.ensure_future(sse_events(response))
    await asyncio.sleep(0.5)
    assert not reading.done()  # an existing run's silence is only keep-alives

    await Run.objects.filter(pk=run.pk).adelete()
    got = await asyncio.wait_for(reading, timeout=3)
    assert [event["type"] for event in got] == ["run.created"]
    gone = await client.get(f"/api/v1/runs/{run.pk}/events/")
    assert gone.status_code == 404  # the browser's reconnect stops here


async def test_a_post_gets_the_apis_json_405_even_with_a_session(conversation, owner):
    run, _ = await sync_to_async(finished_run)(conversation)
    client = AsyncClient(enforce_csrf_checks=True)
    await client.aforce_login(owner)
    for method in (client.post, client.put, client.delete):
        response = await method(f"/api/v1/runs/{run.pk}/events/")
        assert response.status_code == 405
        assert response["Allow"] == "GET, HEAD"
        assert (await error_of(response))["code"] == "method_not_allowed"


# --- following: keep-alives, the caller's credential, Redis restarts ----------------------


async def chunks_until_done(response, *, limit: float = 10) -> str:
    async def read() -> str:
        return b"".join([chunk async for chunk in response.streaming_content]).decode()

    return await asyncio.wait_for(read(), limit)


async def test_a_silence_sends_keep_alive_comments_then_the_events(conversation, owner, settings):
    settings.PARLEY_STREAM_KEEPALIVE_SECONDS = 0.1
    run = await sync_to_async(live_run)(conversation)
    client = await logged_in(owner)
    response = await client.get(f"/api/v1/runs/{run.pk}/events/")
    reading = asyncio.ensure_future(chunks_until_done(response))
    await asyncio.sleep(0.5)

    def finish() -> None:
        writer = eventlog.EventWriter(str(run.pk), next_sequence=1)
        writer.emit("run.completed", run=run_payload(run))

    await sync_to_async(finish)()
    body = await reading
    blocks = [block for block in body.split("\n\n") if block]
    assert blocks.count(": keep-alive") >= 3
    # The comments fill the silence between the first event and the last.
    kinds = [block.split("\n")[1] if block.startswith("id:") else block for block in blocks]
    assert kinds[:2] == ["retry: 2000", "event: run.created"]
    assert kinds[-1] == "event: run.completed"
    assert set(kinds[2:-1]) == {": keep-alive"}


async def test_revoking_the_key_ends_its_stream(conversation, owner, settings):
    settings.PARLEY_STREAM_KEEPALIVE_SECONDS = 0.1
    run = await sync_to_async(live_run)(conversation)
    key, secret = await sync_to_async(account_services.api_key_create)(owner=owner, name="k")
    headers = {"Authorization": f"Bearer {secret}"}
    client = AsyncClient()
    response = await client.get(f"/api/v1/runs/{run.pk}/events/", headers=headers)
    reading = asyncio.ensure_future(sse_events(response))
    await asyncio.sleep(0.3)
    assert not reading.done()  # the run goes on, and so would the stream

    await sync_to_async(account_services.api_key_revoke)(api_key=key)

    got = await asyncio.wait_for(reading, timeout=3)
    assert [event["type"] for event in got] == ["run.created"]
    again = await client.get(f"/api/v1/runs/{run.pk}/events/", headers=headers)
    assert again.status_code == 401  # the reconnect is refused


async def test_logging_out_ends_the_sessions_stream(conversation, owner, settings):
    settings.PARLEY_STREAM_KEEPALIVE_SECONDS = 0.1
    run = await sync_to_async(live_run)(conversation)
    client = await logged_in(owner)
    response = await client.get(f"/api/v1/runs/{run.pk}/events/")
    reading = asyncio.ensure_future(sse_events(response))
    await asyncio.sleep(0.3)
    assert not reading.done()

    await client.alogout()

    assert [event["type"] for event in await asyncio.wait_for(reading, timeout=3)] == [
        "run.created"
    ]


async def test_another_key_of_the_same_user_keeps_its_stream(conversation, owner, settings):
    settings.PARLEY_STREAM_KEEPALIVE_SECONDS = 0.1
    run = await sync_to_async(live_run)(conversation)
    _, secret = await sync_to_async(account_services.api_key_create)(owner=owner, name="kept")
    other, _ = await sync_to_async(account_services.api_key_create)(owner=owner, name="gone")
    response = await AsyncClient().get(
        f"/api/v1/runs/{run.pk}/events/", headers={"Authorization": f"Bearer {secret}"}
    )
    reading = asyncio.ensure_future(sse_events(response))
    await sync_to_async(account_services.api_key_revoke)(api_key=other)
    await asyncio.sleep(0.5)
    assert not reading.done()

    def finish() -> None:
        eventlog.EventWriter(str(run.pk), next_sequence=1).emit(
            "run.completed", run=run_payload(run)
        )

    await sync_to_async(finish)()
    got = await asyncio.wait_for(reading, timeout=3)
    assert [event["type"] for event in got] == ["run.created", "run.completed"]


async def test_a_redis_restart_mid_stream_is_ridden_out(
    conversation, owner, event_log_redis, monkeypatch
):
    monkeypatch.setattr(follow_module, "RETRY_DELAYS", (0.1, 0.2, 0.4, 0.8, 1.6, 3.2))
    run = await sync_to_async(live_run)(conversation)
    client = await logged_in(owner)
    response = await client.get(f"/api/v1/runs/{run.pk}/events/")
    reading = asyncio.ensure_future(sse_events(response))
    await asyncio.sleep(0.3)

    await asyncio.to_thread(event_log_redis.restart, down_seconds=1)

    def write_on() -> None:
        # The worker writes on from where it was; the restarted server lost the rest.
        writer = eventlog.EventWriter(str(run.pk), next_sequence=1, coalesce_ms=0)
        writer.emit("message.created", message_id="m1", role="assistant", attempt=1)
        writer.message_delta("m1", "Still here.")
        writer.emit("run.completed", run=run_payload(run))

    await sync_to_async(write_on)()
    got = await asyncio.wait_for(reading, timeout=20)
    assert [event["sequence_number"] for event in got] == [0, 1, 2, 3]
    assert [event["type"] for event in got][-1] == "run.completed"
    assert eventlog.message_texts(got) == {"m1": "Still here."}
