"""Fixtures for running a run's steps inside the test process, and for code that reaches
the database from a helper thread."""

from collections.abc import AsyncIterator, Callable, Iterator

import httpx2 as httpx
import openai
import pytest
from asgiref.sync import sync_to_async
from django.core import signals
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections, connections
from rest_framework.test import APIClient

from accounts.models import User
from conversations.background_loop import loop_run
from conversations.engine import dispatch, responses, runner, stateless
from conversations.engine.llm.openai_provider import OpenAIProvider
from tests.support.fake_openai import FakeOpenAI
from tests.support.mcp_servers import McpServerProcess, mcp_server_start
from tests.support.openai_api import BASE, key_for


@pytest.fixture
def enqueued(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Steps the runner asks for, instead of sending them to a broker: tests run them."""
    queue: list[str] = []
    monkeypatch.setattr(dispatch, "step_enqueue", lambda run_id, countdown=0: queue.append(run_id))
    return queue


@pytest.fixture
def upstream(fake_openai: FakeOpenAI, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeOpenAI]:
    """The runner and the stateless chat talk to the fake upstream through the real SDK."""
    provider = OpenAIProvider(api_key="sk-test", base_url=fake_openai.base_url, max_retries=0)
    monkeypatch.setattr(runner, "provider_get", lambda: provider)
    monkeypatch.setattr(stateless, "provider_get", lambda: provider)
    monkeypatch.setattr(responses, "provider_get", lambda: provider)
    yield fake_openai
    loop_run(provider.aclose())  # its connections live on the worker's streaming loop


@pytest.fixture
async def close_thread_connections() -> AsyncIterator[None]:
    """Async code under test (a consumer, an ASGI view) reaches the database from a helper
    thread; that thread's connection is closed after the test so the test database can be
    dropped at the end."""
    yield
    await sync_to_async(connections.close_all)()


@pytest.fixture
def as_user() -> Callable[[User], APIClient]:
    """A client logged in with a session (as a browser would be)."""

    def make(user: User) -> APIClient:
        client = APIClient()
        client.force_login(user)
        return client

    return make


@pytest.fixture
def wsgi_app(db) -> Iterator[httpx.WSGITransport]:
    """The app in this process. As Django's test client does, requests keep the test's
    connection: closing it after each request would end the test's transaction."""
    signals.request_started.disconnect(close_old_connections)
    signals.request_finished.disconnect(close_old_connections)
    yield httpx.WSGITransport(app=get_wsgi_application())
    signals.request_started.connect(close_old_connections)
    signals.request_finished.connect(close_old_connections)


@pytest.fixture
def sdk(wsgi_app) -> Callable[[User], openai.OpenAI]:
    """The official SDK with a fresh API key of `user`; no retries, so each error is seen."""

    def make(user: User) -> openai.OpenAI:
        return openai.OpenAI(
            base_url=BASE,
            api_key=key_for(user),
            http_client=httpx.Client(transport=wsgi_app),
            max_retries=0,
        )

    return make


@pytest.fixture(scope="session")
def mcp_servers() -> Iterator[dict[str, McpServerProcess]]:
    """Real MCP tool servers, one of each kind that lasts (tests/support/mcp_servers.py)."""
    started: dict[str, McpServerProcess] = {}
    try:
        for kind in ("tokens", "hangs", "varied"):
            started[kind] = mcp_server_start(kind)
        yield started
    finally:
        for server in started.values():
            server.stop()


@pytest.fixture
def dying_mcp_server() -> Iterator[McpServerProcess]:
    """An MCP tool server whose `crash` tool ends its process mid-call."""
    server = mcp_server_start("dies")
    yield server
    server.stop()
