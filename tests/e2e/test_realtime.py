"""Replies over real sockets: Daphne + a worker + Redis + the database + a websocket client.

A dropped connection or a reload in the middle of a reply loses nothing and doubles
nothing, whichever web process the client lands on.
"""

import http.client
import json
import random
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlsplit

import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from accounts import services as account_services
from conversations.engine import eventlog
from conversations.models import Message, Run
from tests.support.fake_openai import Script
from tests.support.web_server import WebServer, web_start

pytestmark = pytest.mark.django_db(transaction=True)

STORY = "".join(f"word{i} " for i in range(150))


@pytest.fixture
def web(redis_url: str) -> Iterator[WebServer]:
    server = web_start(redis_url=redis_url)
    yield server
    server.stop()


@pytest.fixture
def web_b(redis_url: str) -> Iterator[WebServer]:
    server = web_start(redis_url=redis_url)
    yield server
    server.stop()


@pytest.fixture
def key(owner) -> str:
    return account_services.api_key_create(owner=owner, name="e2e")[1]


@contextmanager
def open_socket(
    server: WebServer, conversation, key: str, query: str = ""
) -> Iterator[ClientConnection]:
    url = f"{server.ws_url}/ws/conversations/{conversation.pk}/{query}"
    headers = {"Authorization": f"Bearer {key}"}
    ws = connect(url, additional_headers=headers, open_timeout=10)
    with ws:
        hello = json.loads(ws.recv(timeout=10))
        assert hello["type"] == "conversation.connected"
        yield ws


def run_events_from(ws: ClientConnection, *, limit: int | None = None) -> list[dict[str, Any]]:
    """Run events (frames with a sequence number) until the terminal one or `limit`."""
    got: list[dict[str, Any]] = []
    while limit is None or len(got) < limit:
        frame = json.loads(ws.recv(timeout=20))
        if "sequence_number" not in frame:
            continue  # a conversation notification
        got.append(frame)
        if frame["type"] in eventlog.TERMINAL_TYPES:
            break
    return got


def finished(got: list[dict[str, Any]]) -> bool:
    return bool(got) and got[-1]["type"] in eventlog.TERMINAL_TYPES


def assert_complete_and_exact(got: list[dict[str, Any]], run: Run) -> None:
    assert [e["sequence_number"] for e in got] == list(range(len(got))), "gap or duplicate"
    assert got[-1]["type"] == "run.completed"
    reply = Message.objects.get(run=run, role="assistant")
    assert eventlog.message_texts(got)[str(reply.id)] == reply.content == STORY


def start_reply(ws: ClientConnection, fake_openai, *, rate: float = 150) -> None:
    fake_openai.push(Script(text=STORY, tokens_per_second=rate))
    ws.send(json.dumps({"type": "message.create", "content": "Tell me a story"}))


def test_a_reply_streams_token_by_token_and_equals_the_stored_message(
    chat, key, web, workers, fake_openai
):
    workers()
    with open_socket(web, chat, key) as ws:
        start_reply(ws, fake_openai)
        got = run_events_from(ws)

    run = Run.objects.get(conversation=chat)
    assert got[0]["type"] == "run.created"
    assert sum(e["type"] == "message.delta" for e in got) >= 2
    assert_complete_and_exact(got, run)


@pytest.mark.parametrize("seed", [11, 12])
def test_cutting_the_connection_at_random_points_loses_nothing(
    chat, key, web, workers, fake_openai, seed
):
    rng = random.Random(seed)
    workers()
    with open_socket(web, chat, key) as ws:
        # Slow enough for ~20 events, so the connection is cut several times mid-reply.
        start_reply(ws, fake_openai, rate=60)
        got = run_events_from(ws, limit=rng.randint(1, 4))
    run_id = got[0]["run_id"]
    cuts = 1
    while not finished(got):
        # Reconnect where the last connection stopped; drop it again after a few events.
        query = f"?run_id={run_id}&after={got[-1]['sequence_number']}"
        with open_socket(web, chat, key, query) as ws:
            got += run_events_from(ws, limit=rng.randint(1, 4))
        cuts += 1

    assert cuts >= 3
    assert_complete_and_exact(got, Run.objects.get(pk=run_id))


def test_a_reload_mid_reply_shows_the_reply_so_far_then_the_rest(
    chat, key, web, workers, fake_openai
):
    workers()
    with open_socket(web, chat, key) as first:
        start_reply(first, fake_openai, rate=60)
        seen = run_events_from(first, limit=8)
    assert not finished(seen)

    with open_socket(web, chat, key) as reloaded:  # a fresh page: no resume point
        got = run_events_from(reloaded)

    assert got[: len(seen)] == seen  # the reply so far came first
    assert_complete_and_exact(got, Run.objects.get(conversation=chat))


def test_switching_between_two_web_processes_mid_stream(
    chat, key, web, web_b, workers, fake_openai
):
    workers()
    with open_socket(web, chat, key) as ws:
        start_reply(ws, fake_openai, rate=80)
        got = run_events_from(ws, limit=5)
    run_id = got[0]["run_id"]
    # Started on A, followed on B, back to A, B again, and A to the end.
    for server in [web_b, web, web_b, web]:
        if finished(got):
            break
        query = f"?run_id={run_id}&after={got[-1]['sequence_number']}"
        with open_socket(server, chat, key, query) as ws:
            got += run_events_from(ws, limit=None if server is web else 6)

    assert_complete_and_exact(got, Run.objects.get(pk=run_id))


def drain(ws: ClientConnection) -> None:
    while True:
        ws.recv(timeout=10)


def test_a_web_process_killed_mid_reply_its_clients_resume_on_another(
    chat, key, web, web_b, workers, fake_openai
):
    workers()
    with open_socket(web, chat, key) as ws:
        start_reply(ws, fake_openai, rate=60)
        got = run_events_from(ws, limit=6)
        web.kill()  # SIGKILL: no close frame, no goodbye
        with pytest.raises(ConnectionClosed):
            drain(ws)
    run_id = got[0]["run_id"]
    # The page reconnects to whichever process answers, from the last event it saw.
    query = f"?run_id={run_id}&after={got[-1]['sequence_number']}"
    with open_socket(web_b, chat, key, query) as resumed:
        got += run_events_from(resumed)

    assert_complete_and_exact(got, Run.objects.get(pk=run_id))


def read_sse(server: WebServer, path: str, headers: dict[str, str]) -> list[dict[str, Any]]:
    address = urlsplit(server.http_url)
    connection = http.client.HTTPConnection(address.hostname or "", address.port, timeout=30)
    connection.request("GET", path, headers=headers)
    response = connection.getresponse()
    assert response.status == 200, response.read()
    assert response.getheader("Content-Type", "").startswith("text/event-stream")
    got, block = [], []
    for raw in response:
        line = raw.decode().rstrip("\n")
        if line:
            block.append(line)
            continue
        fields = dict(item.split(": ", 1) for item in block if not item.startswith(":"))
        block = []
        if "data" in fields:
            event = json.loads(fields["data"])
            assert int(fields["id"]) == event["sequence_number"]
            assert fields["event"] == event["type"]
            got.append(event)
    connection.close()
    return got


def test_the_same_reply_over_server_sent_events_with_resume(
    chat, key, web, workers, fake_openai, outsider
):
    workers()
    with open_socket(web, chat, key) as ws:
        start_reply(ws, fake_openai)
        run_id = run_events_from(ws, limit=1)[0]["run_id"]
    auth = {"Authorization": f"Bearer {key}"}

    got = read_sse(web, f"/api/v1/runs/{run_id}/events/", auth)
    assert_complete_and_exact(got, Run.objects.get(pk=run_id))
    resumed = read_sse(web, f"/api/v1/runs/{run_id}/events/", {**auth, "Last-Event-ID": "4"})
    assert resumed == got[5:]

    # Another user's key gets 404, as if the run did not exist.
    outsider_key = account_services.api_key_create(owner=outsider, name="k")[1]
    address = urlsplit(web.http_url)
    connection = http.client.HTTPConnection(address.hostname or "", address.port, timeout=10)
    path = f"/api/v1/runs/{run_id}/events/"
    connection.request("GET", path, headers={"Authorization": f"Bearer {outsider_key}"})
    assert connection.getresponse().status == 404


def test_a_second_tab_on_another_web_process_follows_the_reply_too(
    chat, key, web, web_b, workers, fake_openai
):
    """Notifications cross processes (the Redis channel layer): a tab on B hears that a
    reply started on A, follows it on its own, and sees it whole."""
    workers()
    with open_socket(web_b, chat, key) as second, open_socket(web, chat, key) as first:
        start_reply(first, fake_openai, rate=80)
        notifications: list[dict[str, Any]] = []
        while not notifications or notifications[-1]["type"] != "conversation.run_started":
            frame = json.loads(second.recv(timeout=20))
            if "sequence_number" not in frame:
                notifications.append(frame)
        got = run_events_from(second)
        first_got = run_events_from(first)

    run = Run.objects.get(pk=got[0]["run_id"])
    assert notifications[-1]["run"]["id"] == str(run.pk)
    assert_complete_and_exact(got, run)
    assert first_got == got  # the same events, in the same order, on both processes
