"""Replies streaming with no worker thread: the step's task ends at once, the leases of
all replies are renewed together, a lost lease or a shutdown stops a reply cleanly."""

import asyncio
import time
import uuid
from collections.abc import AsyncGenerator
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from conversations import engine, services
from conversations.engine import eventlog, inflight, runner, watchdog
from conversations.engine.lease import Lease, leases_renew
from conversations.engine.llm.base import Finished, StreamEvent, TextDelta
from conversations.models import Message, Run
from tests.support.steps import STEP_WAIT_SECONDS

pytestmark = pytest.mark.django_db(transaction=True)


class Slow:
    """A reply of `words` words, one every `pace` seconds."""

    name = "slow"

    def __init__(self, words: int = 20, pace: float = 0.05) -> None:
        self.words, self.pace = words, pace
        self.started = 0

    async def stream(self, **_: Any) -> AsyncGenerator[StreamEvent, None]:
        self.started += 1
        for number in range(self.words):
            yield TextDelta(f"w{number} ")
            await asyncio.sleep(self.pace)
        yield Finished("stop")


def slow_runs(owner, count: int) -> list[Run]:
    runs = []
    for number in range(count):
        conversation = services.conversation_create(owner=owner, title=f"Chat {number}")
        _, run = engine.run_start(conversation=conversation, content="Hello")
        runs.append(run)
    return runs


def test_a_step_returns_while_its_reply_streams_and_the_reply_is_stored_after(
    owner, redis_url, enqueued, monkeypatch
):
    provider = Slow(words=20, pace=0.05)  # a second of reply
    monkeypatch.setattr(runner, "provider_get", lambda: provider)
    (run,) = slow_runs(owner, 1)

    began = time.monotonic()
    streaming = runner.run_step(str(run.id))
    handed_back_after = time.monotonic() - began

    assert streaming is not None
    assert handed_back_after < 0.5  # the worker's thread is free long before the reply ends
    assert not streaming.done()
    streaming.result(timeout=STEP_WAIT_SECONDS)
    run.refresh_from_db()
    assert run.status == Run.Status.COMPLETED
    reply = Message.objects.get(run=run, role=Message.Role.ASSISTANT)
    assert reply.content == "".join(f"w{number} " for number in range(20))


def test_one_thread_streams_many_replies_at_once(owner, redis_url, enqueued, monkeypatch):
    provider = Slow(words=10, pace=0.1)  # each reply takes a second
    monkeypatch.setattr(runner, "provider_get", lambda: provider)
    runs = slow_runs(owner, 12)

    began = time.monotonic()
    # One thread takes every step in turn, as a worker with a single thread would.
    streams = [runner.run_step(str(run.id)) for run in runs]
    for streaming in streams:
        assert streaming is not None
        streaming.result(timeout=STEP_WAIT_SECONDS)
    took = time.monotonic() - began

    assert took < 6  # twelve one-second replies, side by side, not one after another
    statuses = set(Run.objects.filter(pk__in=[run.pk for run in runs]).values_list("status"))
    assert statuses == {(Run.Status.COMPLETED,)}


def test_the_leases_of_many_replies_are_renewed_in_one_statement(owner, redis_url):
    runs = slow_runs(owner, 3)
    leases = [Lease(run_id=run.pk, token=uuid.uuid4()) for run in runs]
    soon = timezone.now()
    for run, lease in zip(runs, leases, strict=True):
        Run.objects.filter(pk=run.pk).update(
            status=Run.Status.IN_PROGRESS, lease_token=lease.token, lease_expires_at=soon
        )
    # Another worker took the second run over; the third was asked to stop.
    Run.objects.filter(pk=runs[1].pk).update(lease_token=uuid.uuid4())
    Run.objects.filter(pk=runs[2].pk).update(cancel_requested_at=timezone.now())

    with CaptureQueriesContext(connection) as queries:
        held, stopping = leases_renew(leases)

    assert len(queries) == 1
    assert held == {runs[0].pk, runs[2].pk}
    assert stopping == {runs[2].pk}
    expiries = dict(Run.objects.values_list("pk", "lease_expires_at"))
    assert (expiries[runs[0].pk] or soon) > soon
    assert (expiries[runs[2].pk] or soon) > soon
    assert expiries[runs[1].pk] == soon  # not ours: untouched


def test_a_reply_longer_than_its_lease_keeps_it(owner, redis_url, enqueued, monkeypatch, settings):
    settings.PARLEY_RUN_LEASE_SECONDS = 1  # renewed every third of a second
    monkeypatch.setattr(inflight, "CHECK_SECONDS", 0.1)
    provider = Slow(words=30, pace=0.1)  # three leases long
    monkeypatch.setattr(runner, "provider_get", lambda: provider)
    runs = slow_runs(owner, 3)

    streams = [runner.run_step(str(run.id)) for run in runs]
    expired_seen = []
    while not all(streaming is not None and streaming.done() for streaming in streams):
        expired_seen.append(watchdog.runs_watchdog()["expired"])
        time.sleep(0.2)

    assert not any(expired_seen)
    assert provider.started == 3  # no reply was started twice
    statuses = set(Run.objects.filter(pk__in=[run.pk for run in runs]).values_list("status"))
    assert statuses == {(Run.Status.COMPLETED,)}


def test_a_reply_whose_lease_was_taken_over_stops_and_stores_nothing(
    owner, redis_url, enqueued, monkeypatch, settings
):
    settings.PARLEY_RUN_LEASE_SECONDS = 1
    monkeypatch.setattr(inflight, "CHECK_SECONDS", 0.1)
    monkeypatch.setattr(runner, "provider_get", lambda: Slow(words=100, pace=0.05))
    (run,) = slow_runs(owner, 1)
    enqueued.clear()  # the first step's, taken here

    streaming = runner.run_step(str(run.id))
    assert streaming is not None
    time.sleep(0.3)
    # What a worker that took the run over after a long stall would have done.
    new_owner = uuid.uuid4()
    Run.objects.filter(pk=run.pk).update(lease_token=new_owner)
    began = time.monotonic()
    streaming.result(timeout=STEP_WAIT_SECONDS)

    assert time.monotonic() - began < 2  # stopped well before its five seconds
    assert not Message.objects.filter(run=run, role=Message.Role.ASSISTANT).exists()
    run.refresh_from_db()
    assert run.status == Run.Status.IN_PROGRESS
    assert run.lease_token == new_owner
    kinds = [event["type"] for event in eventlog.events_all(str(run.id))]
    assert not set(kinds) & {"message.completed", "run.completed", "run.failed"}
    assert enqueued == []  # the new owner goes on; this worker queues nothing


def test_a_shutdown_lets_short_replies_end_and_queues_the_others_again(
    owner, redis_url, enqueued, monkeypatch
):
    providers = iter([Slow(words=5, pace=0.05), Slow(words=200, pace=0.05)])
    monkeypatch.setattr(runner, "provider_get", lambda: next(providers))
    short, long = slow_runs(owner, 2)
    enqueued.clear()

    streams = [runner.run_step(str(short.id)), runner.run_step(str(long.id))]
    handed_back = engine.replies_drain(timeout=1.5)

    assert handed_back == 1
    assert all(streaming is not None and streaming.done() for streaming in streams)
    short.refresh_from_db()
    long.refresh_from_db()
    assert short.status == Run.Status.COMPLETED
    # Nothing of the stopped reply is kept; its run waits for the next worker, at once,
    # and the shutdown does not count against its attempts.
    assert not Message.objects.filter(run=long, role=Message.Role.ASSISTANT).exists()
    assert long.status == Run.Status.IN_PROGRESS
    assert long.lease_token is None
    assert long.attempt == 0
    assert enqueued == [str(long.id)]
