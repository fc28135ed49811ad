"""SIGKILL the worker at the worst moments: the reply still completes exactly once."""

import random
import time
from collections import Counter

import pytest
from django.db import connection

from conversations import engine
from conversations.engine import eventlog, watchdog
from conversations.models import Message, Run
from tests.support.fake_openai import Script
from tests.support.side_effects import EXECUTIONS, SIDE_EFFECTS
from tests.support.stack_runs import (
    STORY,
    assert_log_matches_storage,
    deltas_seen,
    run_wait,
    stored,
)
from tests.support.waiting import wait_until
from tests.support.workers import ChildProcess, Worker, beat_start, worker_start

pytestmark = pytest.mark.django_db(transaction=True)


def recover(run: Run, *, timeout: float = 40) -> Run:
    """What the beat schedule does: sweep until the new worker has finished the run."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        run.refresh_from_db()
        if not run.is_active:
            return run_wait(run, timeout=10)  # and its terminal event is in the log
        watchdog.runs_watchdog()
        time.sleep(0.3)
    raise AssertionError(f"run still {run.status} after the kill")


def rows(sql: str) -> list[tuple]:
    with connection.cursor() as cursor:
        cursor.execute(sql)
        return list(cursor.fetchall())


def test_killed_mid_stream_the_reply_is_streamed_again_and_stored_once(chat, workers, fake_openai):
    first = workers()
    fake_openai.push(Script(text=STORY, tokens_per_second=50), Script(text=STORY))

    _, run = engine.run_start(conversation=chat, content="Tell me about the fox")
    wait_until(lambda: deltas_seen(run), what="the first deltas")
    first.kill()
    workers()
    run = recover(run)

    assert run.status == Run.Status.COMPLETED, run.error
    assert [(m.role, m.content) for m in stored(chat)] == [
        ("user", "Tell me about the fox"),
        ("assistant", STORY),
    ]
    assert len(fake_openai.requests) == 2
    assert_log_matches_storage(run)
    created = [e for e in eventlog.events_all(str(run.id)) if e["type"] == "message.created"]
    assert len(created) == 2
    assert created[0]["message_id"] == created[1]["message_id"]


def test_killed_inside_a_tool_finished_calls_never_run_again(chat, workers, fake_openai):
    first = workers()
    fake_openai.push(
        Script(
            tool_calls=[
                ("call_fast", "record_side_effect", '{"label": "fast"}'),
                ("call_slow", "record_side_effect", '{"label": "slow", "seconds": 1.5}'),
            ]
        ),
        Script(text="Both are recorded."),
    )

    _, run = engine.run_start(conversation=chat, content="Record two things")
    wait_until(
        lambda: rows(f"SELECT 1 FROM {EXECUTIONS} WHERE call_id = 'call_slow'"),
        what="the slow tool to start",
    )
    first.kill()
    workers()
    run = recover(run)

    assert run.status == Run.Status.COMPLETED, run.error
    assert sorted(rows(f"SELECT call_id, label FROM {SIDE_EFFECTS}")) == [
        ("call_fast", "fast"),
        ("call_slow", "slow"),
    ]
    executions = rows(f"SELECT call_id, is_resume FROM {EXECUTIONS}")
    # The stored result of the fast call kept it from running again; the slow one was
    # interrupted, so it ran once more, told that it is a resume.
    assert Counter(call for call, _ in executions) == {"call_fast": 1, "call_slow": 2}
    assert ("call_slow", True) in executions
    tool_messages = Message.objects.filter(conversation=chat, role="tool")
    assert sorted(tool_messages.values_list("tool_call_id", flat=True)) == [
        "call_fast",
        "call_slow",
    ]
    assert [m.role for m in stored(chat)] == ["user", "assistant", "tool", "tool", "assistant"]
    assert_log_matches_storage(run)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_kill_at_a_random_moment_loses_and_duplicates_nothing(chat, workers, fake_openai, seed):
    """A few of bench/chaos.py's random trials, in the suite."""
    kill_after = random.Random(seed).uniform(0.05, 1.5)
    tool_script = Script(
        text=["Let ", "me ", "record ", "that."],
        tokens_per_second=20,
        tool_calls=[("call_1", "record_side_effect", '{"label": "one", "seconds": 0.3}')],
    )
    answer = Script(text=STORY, tokens_per_second=100)
    # By what the request holds, not a queue: a step retried after the kill asks the
    # model again and must get the same answer as its first try.
    fake_openai.respond_with(
        lambda body: answer if any(m["role"] == "tool" for m in body["messages"]) else tool_script
    )
    first = workers()

    _, run = engine.run_start(conversation=chat, content="Record one thing, then tell a story")
    time.sleep(kill_after)
    first.kill()
    workers()
    run = recover(run)

    assert run.status == Run.Status.COMPLETED, run.error
    roles = [m.role for m in stored(chat)]
    assert roles == ["user", "assistant", "tool", "assistant"], roles
    assert [m.seq for m in stored(chat)] == [1, 2, 3, 4]
    assert rows(f"SELECT call_id, label FROM {SIDE_EFFECTS}") == [("call_1", "one")]
    assert stored(chat)[3].content == STORY
    assert_log_matches_storage(run)


def test_a_killed_thread_pool_worker_is_recovered_by_beat_alone(
    chat, fake_openai, redis_url, tmp_path
):
    """As `make run` and the Procfile run it: a threads-pool worker and a real beat. No test
    code sweeps: beat's watchdog finds the expired lease and a fresh worker finishes."""
    env = {
        "OPENAI_API_KEY": "test-key",
        "OPENAI_BASE_URL": fake_openai.base_url,
        "OPENAI_MAX_RETRIES": "0",
        "PARLEY_RUN_LEASE_SECONDS": "2",
        "PARLEY_WATCHDOG_SECONDS": "1",
    }
    fake_openai.push(Script(text=STORY, tokens_per_second=50), Script(text=STORY))
    beat: ChildProcess | None = None
    started: list[Worker] = []
    try:
        beat = beat_start(redis_url=redis_url, env=env, schedule=tmp_path / "beat-schedule")
        started.append(worker_start(redis_url=redis_url, env=env, pool="threads", concurrency=4))

        _, run = engine.run_start(conversation=chat, content="Tell me about the fox")
        wait_until(lambda: deltas_seen(run), what="the first deltas")
        started[0].kill()
        started.append(worker_start(redis_url=redis_url, env=env, pool="threads", concurrency=4))
        run = run_wait(run, timeout=30, workers=started)
    finally:
        for process in [*started, *([beat] if beat else [])]:
            process.stop()

    assert run.status == Run.Status.COMPLETED, run.error
    assert [(m.role, m.content) for m in stored(chat)] == [
        ("user", "Tell me about the fox"),
        ("assistant", STORY),
    ]
    assert_log_matches_storage(run)
