"""A response stream follows its run through a Redis restart, and ends when the caller's
key is revoked or the run goes, under WSGI and ASGI alike. The runs' logs are written by
hand, as a worker writes them; raw httpx reads the stream."""

import asyncio
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import httpx2 as httpx
import pytest
from asgiref.sync import sync_to_async
from django.core.asgi import get_asgi_application
from django.db import connections

from accounts import services as account_services
from conversations.engine import eventlog
from conversations.engine.eventlog import follow as follow_module
from conversations.models import Run
from conversations.serializers import run_payload
from tests.support.events import message_dict
from tests.support.openai_api import BASE, sse_events

INTERVAL = 0.1  # the keep-alive interval for these tests: the caller is checked as often


@pytest.fixture(autouse=True)
def short_keep_alives(settings: Any, redis_url: str) -> None:
    settings.PARLEY_STREAM_KEEPALIVE_SECONDS = INTERVAL


# What the stream of a run that has only started says.
STARTED = ["response.created", "response.in_progress"]


def live_run(conversation) -> Run:
    """A run in progress whose log says only that it started."""
    run = Run.objects.create(conversation=conversation, status="in_progress", model="m")
    writer = eventlog.EventWriter.open(str(run.pk), coalesce_ms=0)
    writer.emit(eventlog.RUN_CREATED, run=run_payload(run))
    writer.emit(eventlog.RUN_IN_PROGRESS, run=run_payload(run))
    return run


def reply_write(run: Run, text: str) -> None:
    """The rest of the run's log, from where it stands (sequence 2)."""
    writer = eventlog.EventWriter(str(run.pk), next_sequence=2, coalesce_ms=0)
    message_id = str(uuid.uuid4())
    writer.emit(eventlog.MESSAGE_CREATED, message_id=message_id, role="assistant", attempt=1)
    writer.message_delta(message_id, text)
    message = message_dict(message_id, text)
    writer.emit(eventlog.MESSAGE_COMPLETED, message=message)
    usage = {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}
    ended = run_payload(run) | {"status": "completed", "usage": usage}
    writer.emit(eventlog.RUN_COMPLETED, run=ended)


def later(seconds: float, action: Callable[[], None]) -> None:
    def run() -> None:
        time.sleep(seconds)
        action()

    threading.Thread(target=run, daemon=True).start()


def events_in(body: str) -> list[dict[str, Any]]:
    return sse_events(body.split("\n"))


def key_and_client(wsgi_app: Any, owner: Any) -> tuple[Any, httpx.Client]:
    key, secret = account_services.api_key_create(owner=owner, name="stream")
    headers = {"Authorization": f"Bearer {secret}"}
    return key, httpx.Client(base_url=BASE, transport=wsgi_app, headers=headers)


def read_after_first_event(http: httpx.Client, run: Run, between: Callable[[], object]) -> str:
    """The stream's body: its first event, then `between()`, then the rest."""
    url = f"/responses/resp_{run.pk.hex}"
    with http.stream("GET", url, params={"stream": "true"}) as answer:
        assert answer.status_code == 200
        lines = answer.iter_lines()
        head = [next(lines), next(lines)]  # event: response.created, data: {...}
        between()
        return "\n".join([*head, *lines])


# --- WSGI: the sync face, asked on the request's own thread -----------------------------


def test_revoking_the_key_ends_the_stream_under_wsgi(wsgi_app, owner, conversation):
    run = live_run(conversation)
    key, http = key_and_client(wsgi_app, owner)
    # Were the stream to go on, the run's end would close it: the test fails, not hangs.
    later(10, lambda: reply_write(run, "Too late."))

    body = read_after_first_event(http, run, lambda: account_services.api_key_revoke(api_key=key))

    assert [event["type"] for event in events_in(body)] == STARTED
    refused = http.get(f"/responses/resp_{run.pk.hex}", params={"stream": "true"})
    assert refused.status_code == 401


def test_a_run_deleted_behind_the_services_back_ends_the_stream(wsgi_app, owner, conversation):
    run = live_run(conversation)
    _, http = key_and_client(wsgi_app, owner)
    later(10, lambda: reply_write(run, "Too late."))

    body = read_after_first_event(http, run, lambda: Run.objects.filter(pk=run.pk).delete())

    assert [event["type"] for event in events_in(body)] == STARTED


def test_a_redis_restart_mid_stream_is_ridden_out_under_wsgi(
    wsgi_app, owner, conversation, event_log_redis, monkeypatch
):
    monkeypatch.setattr(follow_module, "RETRY_DELAYS", (0.1, 0.2, 0.4, 0.8, 1.6, 3.2))
    run = live_run(conversation)
    _, http = key_and_client(wsgi_app, owner)

    def restart_then_write_on() -> None:
        event_log_redis.restart(down_seconds=1)
        reply_write(run, "Still here.")

    body = read_after_first_event(http, run, lambda: later(0.2, restart_then_write_on))

    events = events_in(body)
    assert [event["sequence_number"] for event in events] == list(range(len(events)))
    assert events[-1]["type"] == "response.completed"
    assert events[-1]["response"]["output"][0]["content"][0]["text"] == "Still here."


# --- ASGI: the async face ---------------------------------------------------------------


async def asgi_stream(run: Run, secret: str, *, limit: float = 20) -> str:
    transport = httpx.ASGITransport(app=get_asgi_application())  # type: ignore[arg-type]
    headers = {"Authorization": f"Bearer {secret}"}
    async with httpx.AsyncClient(base_url=BASE, transport=transport, headers=headers) as http:
        url = f"/responses/resp_{run.pk.hex}"
        answer = await asyncio.wait_for(http.get(url, params={"stream": "true"}), limit)
    assert answer.status_code == 200
    return answer.text


@pytest.mark.django_db(transaction=True)
async def test_revoking_the_key_ends_the_stream_under_asgi(conversation, owner):
    run = await sync_to_async(live_run)(conversation)
    key, secret = await sync_to_async(account_services.api_key_create)(owner=owner, name="k")

    async def revoke_soon() -> None:
        await asyncio.sleep(0.4)
        await sync_to_async(account_services.api_key_revoke)(api_key=key)

    revoking = asyncio.ensure_future(revoke_soon())
    try:
        body = await asgi_stream(run, secret, limit=5)
        await revoking
        assert [event["type"] for event in events_in(body)] == STARTED
        assert ": keep-alive" in body  # it was live, and kept alive, until then
    finally:
        await sync_to_async(connections.close_all)()


@pytest.mark.django_db(transaction=True)
async def test_a_redis_restart_mid_stream_is_ridden_out_under_asgi(
    conversation, owner, event_log_redis, monkeypatch
):
    monkeypatch.setattr(follow_module, "RETRY_DELAYS", (0.1, 0.2, 0.4, 0.8, 1.6, 3.2))
    run = await sync_to_async(live_run)(conversation)
    _, secret = await sync_to_async(account_services.api_key_create)(owner=owner, name="k")

    def restart_then_write_on() -> None:
        event_log_redis.restart(down_seconds=1)
        reply_write(run, "Still here.")

    later(0.3, restart_then_write_on)
    try:
        events = events_in(await asgi_stream(run, secret))
        assert [event["sequence_number"] for event in events] == list(range(len(events)))
        assert events[-1]["type"] == "response.completed"
        assert events[-1]["response"]["output"][0]["content"][0]["text"] == "Still here."
    finally:
        await sync_to_async(connections.close_all)()


# --- the caller's key ended: at once, keep-alives far apart ----------------------------------

PROMPTLY = 3.0  # well within the keep-alive interval below


@pytest.mark.django_db(transaction=True)  # notices go out after commit
@pytest.mark.parametrize("how", ["revoked", "user deactivated"])
def test_the_keys_end_ends_the_stream_at_once_under_wsgi(
    wsgi_app, owner, conversation, settings, how
):
    settings.PARLEY_STREAM_KEEPALIVE_SECONDS = 60
    run = live_run(conversation)
    key, http = key_and_client(wsgi_app, owner)
    later(10, lambda: reply_write(run, "Too late."))
    ended_at = []

    def end_the_key() -> None:
        if how == "revoked":
            account_services.api_key_revoke(api_key=key)
        else:
            owner.is_active = False
            owner.save(update_fields=["is_active"])
        ended_at.append(time.monotonic())

    body = read_after_first_event(http, run, end_the_key)

    assert time.monotonic() - ended_at[0] < PROMPTLY
    assert [event["type"] for event in events_in(body)] == STARTED


@pytest.mark.django_db(transaction=True)
def test_another_keys_revocation_leaves_the_stream_open_under_wsgi(
    wsgi_app, owner, conversation, settings
):
    settings.PARLEY_STREAM_KEEPALIVE_SECONDS = 60
    run = live_run(conversation)
    _, http = key_and_client(wsgi_app, owner)
    other, _ = account_services.api_key_create(owner=owner, name="other")

    def revoke_the_other_then_reply() -> None:
        account_services.api_key_revoke(api_key=other)
        later(1, lambda: reply_write(run, "Still here."))

    body = read_after_first_event(http, run, revoke_the_other_then_reply)

    events = events_in(body)
    assert events[-1]["type"] == "response.completed"
    assert events[-1]["response"]["output"][0]["content"][0]["text"] == "Still here."


@pytest.mark.django_db(transaction=True)
async def test_revoking_the_key_ends_the_stream_at_once_under_asgi(conversation, owner, settings):
    settings.PARLEY_STREAM_KEEPALIVE_SECONDS = 60
    run = await sync_to_async(live_run)(conversation)
    key, secret = await sync_to_async(account_services.api_key_create)(owner=owner, name="k")
    revoked_at = []

    async def revoke_soon() -> None:
        await asyncio.sleep(0.5)
        await sync_to_async(account_services.api_key_revoke)(api_key=key)
        revoked_at.append(time.monotonic())

    revoking = asyncio.ensure_future(revoke_soon())
    try:
        body = await asgi_stream(run, secret, limit=0.5 + PROMPTLY)
        await revoking
        assert time.monotonic() - revoked_at[0] < PROMPTLY
        assert [event["type"] for event in events_in(body)] == STARTED
    finally:
        await sync_to_async(connections.close_all)()
