"""The conversation websocket driven with Channels' communicator: opening sockets as a
browser (a session cookie from an allowed origin) or a program (an API key) does, reading
frames, and how a socket ends."""

import asyncio
from typing import Any

from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.test import Client

from accounts import services as account_services
from accounts.models import ApiKey, User

ORIGIN = (b"origin", b"http://localhost:8000")
HOST = (b"host", b"localhost:8000")

WITHIN = 1.0  # seconds a socket may stay open after its credential ended


def application() -> Any:
    from config.asgi import application

    return application


def session_cookie(user) -> bytes:
    client = Client()
    client.force_login(user)
    return f"sessionid={client.cookies['sessionid'].value}".encode()


def socket(
    conversation_id, *headers: tuple[bytes, bytes], query: str = ""
) -> WebsocketCommunicator:
    return WebsocketCommunicator(
        application(), f"/ws/conversations/{conversation_id}/{query}", headers=list(headers)
    )


async def connect_as(user, conversation_id, *, query: str = "") -> WebsocketCommunicator:
    cookie = await sync_to_async(session_cookie)(user)
    ws = socket(conversation_id, ORIGIN, HOST, (b"cookie", cookie), query=query)
    connected, _ = await ws.connect()
    assert connected
    hello = await ws.receive_json_from(timeout=5)
    assert hello["type"] == "conversation.connected"
    return ws


async def open_socket(conversation_id: Any, *headers: tuple[bytes, bytes]) -> WebsocketCommunicator:
    ws = socket(conversation_id, *headers)
    connected, _ = await ws.connect()
    assert connected
    assert (await ws.receive_json_from(timeout=5))["type"] == "conversation.connected"
    return ws


async def key_socket(user: User, conversation_id: Any) -> tuple[WebsocketCommunicator, ApiKey]:
    key, secret = await sync_to_async(account_services.api_key_create)(owner=user, name="bot")
    ws = await open_socket(conversation_id, (b"authorization", f"Bearer {secret}".encode()))
    return ws, key


async def receive_until(ws, kind: str, timeout: float = 5) -> list[dict[str, Any]]:
    """Frames up to and including the first of type `kind`."""
    seen = []
    while True:
        frame = await ws.receive_json_from(timeout=timeout)
        seen.append(frame)
        if frame["type"] == kind:
            return seen


async def assert_closed_with(ws, code: int) -> None:
    connected, _ = await ws.connect()
    assert connected  # accepted first, so the close code reaches the client
    message = await ws.receive_output(timeout=5)
    assert message == {"type": "websocket.close", "code": code}


async def assert_closed(ws: WebsocketCommunicator, within: float = WITHIN) -> None:
    """Closed with 4401 in time; frames sent before the close (a notice that the
    conversation went with the account) do not matter."""
    deadline = asyncio.get_running_loop().time() + within
    while True:
        left = deadline - asyncio.get_running_loop().time()
        message = await ws.receive_output(timeout=max(left, 0.01))
        if message["type"] != "websocket.send":
            break
    assert message == {"type": "websocket.close", "code": 4401}


async def assert_open(ws: WebsocketCommunicator) -> None:
    await ws.send_json_to({"type": "ping"})
    assert await ws.receive_json_from(timeout=5) == {"type": "pong"}
