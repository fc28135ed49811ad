"""What a step costs the worker outside streaming: its statements and Redis round trips,
and that the cheaper ways keep the step's behaviour (leases, the event log, turns)."""

import threading
import time
import uuid
from collections.abc import AsyncGenerator
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from conversations import engine, services
from conversations.engine import eventlog, model_call, runner
from conversations.engine.eventlog import redis_client
from conversations.engine.lease import lease_take
from conversations.engine.llm.base import Finished, StreamEvent, TextDelta
from conversations.engine.turns import Turns
from conversations.models import Branch, Message, Run
from conversations.selectors.branches import path_messages
from conversations.selectors.history import path_history
from conversations.services.messages import NewMessage, messages_append
from tests.support.events import run_dict
from tests.support.steps import step_run
from tests.support.threads import run_threads

pytestmark = pytest.mark.django_db(transaction=True)


class AtOnce:
    name = "at-once"

    async def stream(self, **_: Any) -> AsyncGenerator[StreamEvent, None]:
        yield TextDelta("Done.")
        yield Finished("stop")


@pytest.fixture
def at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runner, "provider_get", AtOnce)


def start(conversation, content: str = "Hello") -> Run:
    _, run = engine.run_start(conversation=conversation, content=content)
    return run


class RedisCommands:
    """The commands this process sends to Redis from sync code, by name."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.names: list[str] = []
        client = redis_client()
        execute = client.execute_command

        def counted(*args: Any, **options: Any) -> Any:
            self.names.append(str(args[0]).upper())
            return execute(*args, **options)

        monkeypatch.setattr(client, "execute_command", counted)


def test_a_first_step_takes_its_lease_and_reads_its_input_in_a_statement_each(
    conversation, redis_url, enqueued, at_once, monkeypatch
):
    run = start(conversation)
    commands = RedisCommands(monkeypatch)

    with CaptureQueriesContext(connection) as captured:
        streaming = runner.run_step(str(run.id))
    assert streaming is not None
    streaming.result(timeout=30)

    # The lease with everything the step begins with (on SQLite: the UPDATE, then the
    # read), then the model input; the reply is stored on a store thread.
    leasing = 1 if connection.vendor == "postgresql" else 2
    assert len(captured) == leasing + 1, [query["sql"] for query in captured]
    assert "conversations_conversation" in captured[leasing - 1]["sql"]
    # The log is not read before the first write: the run's announcement is its first.
    assert "XREVRANGE" not in commands.names
    run.refresh_from_db()
    assert run.status == Run.Status.COMPLETED
    assert (run.attempt, run.iterations) == (0, 1)
    types = [event["type"] for event in eventlog.events_all(str(run.id))]
    assert types == [
        "run.created",
        "run.in_progress",
        "message.created",
        "message.delta",
        "message.completed",
        "run.completed",
    ]
    assert [event["sequence_number"] for event in eventlog.events_all(str(run.id))] == list(
        range(6)
    )


def test_storing_the_reply_ends_the_run_with_one_update_under_the_lease(
    conversation, redis_url, enqueued, at_once, monkeypatch
):
    run = start(conversation)
    store = model_call.reply_settle
    captured: list[dict[str, Any]] = []

    def counted(*args: Any, **kwargs: Any) -> None:
        with CaptureQueriesContext(connection) as queries:
            store(*args, **kwargs)
        captured.extend(queries.captured_queries)

    monkeypatch.setattr(model_call, "reply_settle", counted)
    step_run(str(run.id))

    runs = [query["sql"] for query in captured if "conversations_run" in query["sql"]]
    assert len(runs) == 1
    assert runs[0].startswith("UPDATE")
    assert "lease_token" in runs[0]
    assert Message.objects.get(run=run, role=Message.Role.ASSISTANT).content == "Done."


def test_a_run_never_announced_still_gets_its_log_in_order(
    conversation, redis_url, enqueued, at_once
):
    run = start(conversation)
    redis_client().delete(eventlog.stream_key(str(run.id)))  # the announcement was lost

    step_run(str(run.id))

    events = eventlog.events_all(str(run.id))
    assert [event["type"] for event in events][:3] == [
        "run.created",
        "run.in_progress",
        "message.created",
    ]
    assert [event["sequence_number"] for event in events] == list(range(len(events)))
    assert events[-1]["type"] == "run.completed"


def test_a_first_step_after_more_events_goes_on_after_the_last(
    conversation, redis_url, enqueued, at_once
):
    run = start(conversation)
    # Something else was appended after the announcement: the step reads where the log is.
    eventlog.EventWriter.open(str(run.id)).emit(eventlog.DRAFT_UPDATED, draft="x")

    step_run(str(run.id))

    events = eventlog.events_all(str(run.id))
    assert [event["type"] for event in events][:4] == [
        "run.created",
        "draft.updated",
        "run.in_progress",
        "message.created",
    ]
    assert [event["sequence_number"] for event in events] == list(range(len(events)))


def test_the_second_event_lands_only_after_exactly_one(redis_url):
    client = redis_client()
    empty, one, two = (str(uuid.uuid4()) for _ in range(3))
    eventlog.EventWriter(one).emit(eventlog.RUN_CREATED, run=run_dict(one))
    for _ in range(2):
        eventlog.EventWriter.open(two).emit(eventlog.RUN_CREATED, run=run_dict(two))
    try:
        assert not eventlog.EventWriter(empty, next_sequence=1).emit_second(
            eventlog.RUN_IN_PROGRESS, run=run_dict(empty)
        )
        assert not client.exists(eventlog.stream_key(empty))  # nothing made, no gap
        assert not eventlog.EventWriter(two, next_sequence=1).emit_second(
            eventlog.RUN_IN_PROGRESS, run=run_dict(two)
        )
        assert [e["type"] for e in eventlog.events_all(two)] == ["run.created"] * 2
        writer = eventlog.EventWriter(one, next_sequence=1)
        assert writer.emit_second(eventlog.RUN_IN_PROGRESS, run=run_dict(one))
        assert writer.next_sequence == 2
        assert [e["type"] for e in eventlog.events_all(one)] == ["run.created", "run.in_progress"]
        assert client.ttl(eventlog.stream_key(one)) > 0
    finally:
        client.delete(*(eventlog.stream_key(key) for key in (empty, one, two)))


def test_the_second_event_already_landed_by_a_retry_counts_as_written(redis_url):
    """redis-py resends a command whose connection dropped: the resent append is refused,
    yet the entry there is ours."""
    run_id = str(uuid.uuid4())
    run = run_dict(run_id)
    eventlog.EventWriter(run_id).emit(eventlog.RUN_CREATED, run=run)
    eventlog.EventWriter(run_id, next_sequence=1).emit(eventlog.RUN_IN_PROGRESS, run=run)
    try:
        writer = eventlog.EventWriter(run_id, next_sequence=1)
        assert writer.emit_second(eventlog.RUN_IN_PROGRESS, run=run)
        assert len(eventlog.events_all(run_id)) == 2
        # Another event there is a rival's, not ours.
        other = eventlog.EventWriter(run_id, next_sequence=1)
        assert not other.emit_second(eventlog.RUN_IN_PROGRESS, run=run_dict("another"))
    finally:
        redis_client().delete(eventlog.stream_key(run_id))


def test_a_lease_is_taken_once_and_only_from_an_active_run(conversation, redis_url, enqueued):
    run = start(conversation)

    taken = lease_take(str(run.id))
    assert taken is not None
    assert taken.started
    assert lease_take(str(run.id)) is None  # held
    assert taken.run.conversation.owner.pk == conversation.owner_id
    assert taken.run.branch is not None
    assert taken.run.branch.pk == conversation.active_branch_id
    stored = Run.objects.get(pk=run.pk)
    assert (stored.status, stored.attempt, stored.lease_token) == (
        Run.Status.IN_PROGRESS,
        1,
        taken.lease.token,
    )
    assert stored.started_at == taken.run.started_at

    # Expired: taken again, counted as another attempt, and not started again.
    Run.objects.filter(pk=run.pk).update(lease_expires_at=timezone.now() - timedelta(seconds=1))
    again = lease_take(str(run.id))
    assert again is not None
    assert not again.started
    assert again.run.attempt == 2
    assert again.run.started_at == stored.started_at
    assert not taken.lease.update(attempt=0)  # the old lease holds nothing now
    assert again.lease.update(attempt=0)

    Run.objects.filter(pk=run.pk).update(status=Run.Status.COMPLETED, lease_expires_at=None)
    assert lease_take(str(run.id)) is None
    assert not again.lease.end(status=Run.Status.FAILED)  # no longer active


def test_a_lease_update_writes_what_the_orm_would(conversation, redis_url, enqueued):
    run = start(conversation)
    taken = lease_take(str(run.id))
    assert taken is not None
    usage = {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7}

    assert taken.lease.update(usage=usage, iterations=2, draft_edits_seen=None, error=None)

    stored = Run.objects.get(pk=run.pk)
    assert (stored.usage, stored.iterations, stored.draft_edits_seen, stored.error) == (
        usage,
        2,
        None,
        None,
    )
    assert Run.objects.filter(pk=run.pk, error__isnull=True).exists()  # SQL NULL, not JSON


def test_the_history_read_matches_the_path_along_branches(conversation):
    calls = [{"id": "c1", "name": "calculator", "arguments": '{"expression": "1+1"}'}]
    messages_append(
        conversation=conversation,
        messages=[
            NewMessage(role=Message.Role.USER, content="one"),
            NewMessage(role=Message.Role.ASSISTANT, tool_calls=calls),
            NewMessage(role=Message.Role.TOOL, content="2", tool_call_id="c1", name="calculator"),
            NewMessage(role=Message.Role.ASSISTANT, content="It is 2."),
        ],
    )
    root = Branch.objects.get(conversation=conversation)
    # Three segments: the root's first two messages, the fork's next two, then the leaf's.
    fork = services.branch_fork(conversation=conversation, source=root, fork_seq=2)
    messages_append(
        conversation=conversation,
        branch_id=fork.pk,
        messages=[NewMessage(role=Message.Role.USER, content=f"fork {n}") for n in range(3)],
    )
    fork.refresh_from_db()
    leaf = services.branch_fork(conversation=conversation, source=fork, fork_seq=4)
    messages_append(
        conversation=conversation,
        branch_id=leaf.pk,
        messages=[NewMessage(role=Message.Role.USER, content=f"leaf {n}") for n in range(2)],
    )
    leaf.refresh_from_db()

    fields = ("role", "content", "tool_calls", "tool_call_id")
    for after, last in [(0, 6), (1, 5), (2, 3), (0, 2), (3, 3), (4, 6), (5, 6)]:
        expected = list(path_messages(leaf, after=after, last=last).values_list(*fields))
        read = path_history(leaf, after=after, last=last)
        assert [tuple(row)[: len(fields)] for row in read] == expected
        # None of these messages carries files: none is marked for reading them.
        assert all(row.with_files is None for row in read)
    history = path_history(leaf, after=0, last=6)
    assert [row.content for row in history] == ["one", "", "fork 0", "fork 1", "leaf 0", "leaf 1"]
    assert history[1].tool_calls == calls


def test_a_step_with_nobody_waiting_goes_on_with_its_turn(settings):
    settings.PARLEY_WORKER_BUSY_STEPS = 1
    turns = Turns()
    given_back: list[str] = []

    with turns.taken(urgent=True):
        turns.requeue(before=lambda: given_back.append("connection"))
        assert given_back == []
    with turns.taken():  # and the turn is free afterwards
        pass


def test_a_step_requeues_behind_a_waiting_lease(settings):
    settings.PARLEY_WORKER_BUSY_STEPS = 1
    turns = Turns()
    order: list[str] = []
    leased, waiting = threading.Event(), threading.Event()

    def first() -> None:
        with turns.taken(urgent=True):
            order.append("first lease")
            leased.set()
            assert waiting.wait(timeout=5)
            time.sleep(0.05)  # the other is waiting for the turn by now
            turns.requeue(before=lambda: order.append("connection given back"))
            order.append("first work")

    def second() -> None:
        assert leased.wait(timeout=5)
        waiting.set()
        with turns.taken(urgent=True):
            order.append("second lease")

    run_threads(first, second)
    assert order == ["first lease", "connection given back", "second lease", "first work"]
