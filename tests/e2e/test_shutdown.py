"""A worker stopped as deploys stop it (SIGTERM): the replies it is streaming either end
before it exits or go straight back to the queue, never waiting out their lease."""

import pytest

from conversations import engine
from conversations.engine import eventlog
from conversations.models import Run
from tests.support.fake_openai import Script
from tests.support.stack_runs import (
    STORY,
    assert_log_matches_storage,
    deltas_seen,
    run_wait,
    stored,
)
from tests.support.waiting import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_reply_near_its_end_finishes_before_the_worker_exits(chat, workers, fake_openai):
    first = workers(PARLEY_WORKER_DRAIN_SECONDS="20")
    fake_openai.push(Script(text="Almost there, and done.", tokens_per_second=4))

    _, run = engine.run_start(conversation=chat, content="Finish up")
    wait_until(lambda: deltas_seen(run), what="the first deltas")
    first.stop()  # waits for the process to exit

    run.refresh_from_db()
    assert run.status == Run.Status.COMPLETED, run.error
    assert [m.content for m in stored(chat)] == ["Finish up", "Almost there, and done."]
    assert len(fake_openai.requests) == 1
    assert "replies stopped and queued again" not in first.log()


def test_a_long_reply_is_queued_again_at_once_and_finished_by_the_next_worker(
    chat, workers, fake_openai
):
    first = workers(PARLEY_WORKER_DRAIN_SECONDS="1")
    fake_openai.push(Script(text=STORY, tokens_per_second=20), Script(text=STORY))

    _, run = engine.run_start(conversation=chat, content="Tell me about the fox")
    wait_until(lambda: deltas_seen(run), what="the first deltas")
    first.stop()
    assert "1 replies stopped and queued again" in first.log()
    run.refresh_from_db()
    assert run.lease_token is None  # given back, not left to expire

    # No watchdog runs here: only the queued step can bring the run to the next worker.
    workers()
    run = run_wait(run, timeout=30)

    assert run.status == Run.Status.COMPLETED, run.error
    assert [(m.role, m.content) for m in stored(chat)] == [
        ("user", "Tell me about the fox"),
        ("assistant", STORY),
    ]
    assert run.attempt == 0
    assert_log_matches_storage(run)
    created = [e for e in eventlog.events_all(str(run.id)) if e["type"] == "message.created"]
    assert len(created) == 2
    assert created[0]["message_id"] == created[1]["message_id"]
