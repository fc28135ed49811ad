"""Fixtures for running a run's steps inside the test process, and for code that reaches
the database from a helper thread."""

from collections.abc import AsyncIterator, Iterator

import pytest
from asgiref.sync import sync_to_async
from django.db import connections

from conversations.background_loop import loop_run
from conversations.engine import dispatch, responses, runner, stateless
from conversations.engine.llm.openai_provider import OpenAIProvider
from tests.support.fake_openai import FakeOpenAI


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
