"""Clients of /openai/v1/: the official `openai` SDK and raw httpx, driven in this
process through WSGI (inside the test's transaction) or against a live server."""

import httpx2 as httpx
import openai
import pytest

from tests.support.openai_api import BASE, key_for


@pytest.fixture(autouse=True)
def _throttles_fresh(fresh_throttles: None) -> None:
    """Every API test starts with its own request budgets."""


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
