"""Fixtures for end-to-end runs: real worker processes, the real broker, the fake upstream.
Every test here starts a stack of processes, so every one is marked slow."""

from collections.abc import Iterator
from pathlib import Path

import pytest

from conversations import services
from conversations.models import Conversation
from tests.support.fake_openai import FakeOpenAI
from tests.support.side_effects import tables_reset
from tests.support.workers import Worker, WorkerFactory, worker_start

HERE = Path(__file__).resolve().parent


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by marker
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.is_relative_to(HERE):
            item.add_marker(pytest.mark.slow)


@pytest.fixture
def workers(redis_url: str, fake_openai: FakeOpenAI) -> Iterator[WorkerFactory]:
    """Start worker processes on demand (each call one more); all stopped at the end."""
    tables_reset()
    started: list[Worker] = []

    def start(**env: str) -> Worker:
        base = {
            "OPENAI_API_KEY": "test-key",
            "OPENAI_BASE_URL": fake_openai.base_url,
            "OPENAI_MAX_RETRIES": "0",
            "PARLEY_RUN_LEASE_SECONDS": "2",
        }
        worker = worker_start(
            redis_url=redis_url, env=base | env, include="tests.support.side_effect_tools"
        )
        started.append(worker)
        return worker

    yield start
    for worker in started:
        worker.stop()


@pytest.fixture
def chat(owner) -> Conversation:
    conversation = services.conversation_create(owner=owner, model="gpt-test")
    Conversation.objects.filter(pk=conversation.pk).update(
        tools=[*conversation.tools, "record_side_effect"]
    )
    conversation.refresh_from_db()
    return conversation
