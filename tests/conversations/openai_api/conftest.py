"""Clients of /openai/v1/: the official `openai` SDK and raw httpx, driven in this
process through WSGI (inside the test's transaction) or against a live server."""

from collections.abc import Callable, Iterator

import httpx2 as httpx
import openai
import pytest
from django.core import signals
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections

from accounts.models import User
from tests.support.openai_api import BASE, key_for

Client = Callable[[User], openai.OpenAI]


@pytest.fixture(autouse=True)
def _throttles_fresh(fresh_throttles: None) -> None:
    """Every API test starts with its own request budgets."""


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
def sdk(wsgi_app) -> Client:
    """The official SDK with a fresh API key of `user`; no retries, so each error is seen."""

    def make(user: User) -> openai.OpenAI:
        return openai.OpenAI(
            base_url=BASE,
            api_key=key_for(user),
            http_client=httpx.Client(transport=wsgi_app),
            max_retries=0,
        )

    return make


@pytest.fixture
def client(sdk, owner) -> openai.OpenAI:
    return sdk(owner)


@pytest.fixture
def raw(wsgi_app, owner) -> httpx.Client:
    """A client written against the HTTP contract alone, with the owner's key."""
    return httpx.Client(
        base_url=BASE,
        transport=wsgi_app,
        headers={"Authorization": f"Bearer {key_for(owner)}"},
    )


# --- responses: runs driven in this process --------------------------------------------


@pytest.fixture
def model(fake_openai, monkeypatch: pytest.MonkeyPatch):
    """The fake upstream as the model of every run and unstored response."""
    from conversations.background_loop import loop_run
    from conversations.engine import responses, runner
    from conversations.engine.llm.openai_provider import OpenAIProvider

    provider = OpenAIProvider(api_key="sk-test", base_url=fake_openai.base_url, max_retries=0)
    monkeypatch.setattr(runner, "provider_get", lambda: provider)
    monkeypatch.setattr(responses, "provider_get", lambda: provider)
    yield fake_openai
    loop_run(provider.aclose())


@pytest.fixture
def worker(monkeypatch: pytest.MonkeyPatch, redis_url) -> None:
    """Each enqueued step runs in a thread of this process, as a Celery worker takes it."""
    from tests.support.steps import steps_in_threads

    steps_in_threads(monkeypatch)
