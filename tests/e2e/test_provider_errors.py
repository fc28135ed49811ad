"""Provider failures through a real worker: each ends the run `failed` with its own code,
keeps the user's message and stores no reply, and the event log ends with `run.failed`.

The cases share one worker (and one fake upstream) to stay fast; it lives in this module
only, so no other test's steps reach it.
"""

from collections.abc import Iterator

import pytest

from conversations import engine
from conversations.engine import eventlog
from conversations.models import Run
from tests.support.fake_openai import FakeOpenAI, Script
from tests.support.stack_runs import run_wait, stored
from tests.support.workers import Worker, worker_start

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(scope="module")
def upstream() -> Iterator[FakeOpenAI]:
    """One fake upstream for the provider-error cases, so they can share one worker."""
    with FakeOpenAI() as server:
        yield server


@pytest.fixture(scope="module")
def impatient_worker(django_db_setup, redis_url: str, upstream: FakeOpenAI) -> Iterator[Worker]:
    """A worker that gives up on a silent upstream after 1 s and retries once; the fake's
    `Retry-After: 0` makes those retries immediate. Needs the test database set up first,
    as the worker is pointed at it."""
    env = {
        "OPENAI_API_KEY": "test-key",
        "OPENAI_BASE_URL": upstream.base_url,
        "OPENAI_TIMEOUT_SECONDS": "1",
        "OPENAI_MAX_RETRIES": "1",
    }
    worker = worker_start(redis_url=redis_url, env=env, include="tests.support.side_effect_tools")
    yield worker
    worker.stop()


@pytest.fixture
def fresh_upstream(upstream: FakeOpenAI) -> FakeOpenAI:
    upstream.reset()
    return upstream


SLOW_FIRST_TOKEN = Script(text="Too late.", first_token_delay=5)  # the worker waits 1 s
CUT_MID_REPLY = Script(text="The answer is forty-two, as everyone knows.", cut_after_chunks=4)


@pytest.mark.parametrize(
    ("scripts", "code", "requests_made"),
    [
        # Retryable failures are tried twice (OPENAI_MAX_RETRIES=1), then reported.
        ([Script.http(429, retry_after=0)] * 2, "rate_limited", 2),
        ([Script.http(500, retry_after=0)] * 2, "provider_error", 2),
        ([SLOW_FIRST_TOKEN] * 2, "provider_timeout", 2),
        # Text had reached the user when the connection broke: never retried.
        ([CUT_MID_REPLY], "connection_error", 1),
        ([Script.http(400, code="context_length_exceeded")], "context_length_exceeded", 1),
        ([Script.http(401)], "authentication_failed", 1),
    ],
    ids=["429", "500", "slow-first-token", "cut-mid-reply", "context-length", "401"],
)
def test_a_provider_error_fails_the_run_with_its_code_and_keeps_only_the_question(
    chat, impatient_worker, fresh_upstream, scripts, code, requests_made
):
    fresh_upstream.push(*scripts)

    _, run = engine.run_start(conversation=chat, content="What is 6*7?")
    run = run_wait(run, workers=[impatient_worker])

    assert run.status == Run.Status.FAILED
    assert run.error is not None
    assert run.error["code"] == code
    assert run.error["message"]
    assert [(m.seq, m.role, m.content) for m in stored(chat)] == [(1, "user", "What is 6*7?")]
    assert len(fresh_upstream.requests) == requests_made
    last = eventlog.events_all(str(run.id))[-1]
    assert last["type"] == "run.failed"
    assert last["run"]["error"] == run.error


def test_a_rate_limited_call_is_retried_and_the_run_completes(
    chat, impatient_worker, fresh_upstream
):
    fresh_upstream.push(Script.http(429, retry_after=0), Script(text="Six times seven is 42."))

    _, run = engine.run_start(conversation=chat, content="What is 6*7?")
    run = run_wait(run, workers=[impatient_worker])

    assert run.status == Run.Status.COMPLETED, run.error
    assert [(m.role, m.content) for m in stored(chat)] == [
        ("user", "What is 6*7?"),
        ("assistant", "Six times seven is 42."),
    ]
    assert len(fresh_upstream.requests) == 2
    log = eventlog.events_all(str(run.id))
    assert log[-1]["type"] == "run.completed"
    assert "run.failed" not in [e["type"] for e in log]
