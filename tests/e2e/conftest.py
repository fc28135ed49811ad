"""Fixtures for end-to-end runs: real worker processes, the real broker, the fake upstream."""

import time
from collections.abc import Callable, Iterator

import pytest

from conversations import services
from conversations.engine import eventlog
from conversations.models import Conversation, Message, Run
from tests.e2e.side_effects import tables_reset
from tests.e2e.worker import Worker, worker_start
from tests.fake_openai import FakeOpenAI

WorkerFactory = Callable[..., Worker]


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
        worker = worker_start(redis_url=redis_url, env=base | env, include="tests.e2e.tools")
        started.append(worker)
        return worker

    yield start
    for worker in started:
        worker.stop()


def run_wait(run: Run, *, timeout: float = 30, workers: list[Worker] | None = None) -> Run:
    """Wait until the run has ended and its log says so; fail with the workers' logs if not."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        run.refresh_from_db()
        # The terminal event is written just after the commit that ends the run.
        last = eventlog.event_log_last(str(run.id))
        if not run.is_active and last is not None and last["type"] in eventlog.TERMINAL_TYPES:
            return run
        time.sleep(0.05)
    logs = "\n\n".join(w.log()[-4000:] for w in workers or [])
    raise AssertionError(f"run still {run.status} after {timeout}s\n{logs}")


def stored(conversation: Conversation) -> list[Message]:
    return list(Message.objects.filter(conversation=conversation).order_by("seq"))


@pytest.fixture
def chat(owner) -> Conversation:
    conversation = services.conversation_create(owner=owner, model="gpt-test")
    Conversation.objects.filter(pk=conversation.pk).update(
        tools=[*conversation.tools, "record_side_effect"]
    )
    conversation.refresh_from_db()
    return conversation
