"""The step runner in-process: leases, the attempt cap, cancellation, the watchdog."""

import asyncio
import threading
import time
from collections.abc import AsyncGenerator
from datetime import timedelta
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.db import connection
from django.utils import timezone

from conversations import engine, services, tools
from conversations.engine import eventlog, inflight, runner, watchdog
from conversations.engine.cancel import cancel_flag_key
from conversations.engine.llm.base import (
    Finished,
    GenerationSettings,
    StreamEvent,
    TextDelta,
    UsageReported,
)
from conversations.models import Conversation, Message, Run
from conversations.services.messages import NewMessage, message_append
from conversations.tools.registry import ToolContext, tool
from tests.support.steps import step_run

pytestmark = pytest.mark.django_db(transaction=True)


class ScriptedProvider:
    name = "scripted"

    def __init__(self, *replies: str | Exception) -> None:
        self.replies = list(replies)
        self.calls: list[list[dict[str, Any]]] = []
        self.generations: list[GenerationSettings | None] = []

    async def stream(
        self,
        *,
        model: str,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        generation: GenerationSettings | None = None,
    ) -> AsyncGenerator[StreamEvent, None]:
        self.calls.append(messages)
        self.generations.append(generation)
        reply = self.replies.pop(0)
        if isinstance(reply, Exception):
            raise reply
        for word in reply.split(" "):
            yield TextDelta(word + " ")
        yield UsageReported(prompt_tokens=10, completion_tokens=5, total_tokens=15)
        yield Finished("stop")


def provide(monkeypatch, provider: ScriptedProvider) -> ScriptedProvider:
    monkeypatch.setattr(runner, "provider_get", lambda: provider)
    return provider


def start(conversation, content="Hello") -> Run:
    # run_start announces the run after commit: that needs the event log, not a worker.
    _, run = engine.run_start(conversation=conversation, content=content)
    return run


def test_a_step_streams_stores_and_completes(conversation, redis_url, enqueued, monkeypatch):
    provide(monkeypatch, ScriptedProvider("Hi there friend"))
    run = start(conversation)

    step_run(str(run.id))

    run.refresh_from_db()
    assert run.status == Run.Status.COMPLETED
    assert run.usage == {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
    reply = Message.objects.get(conversation=conversation, role="assistant")
    assert reply.content == "Hi there friend "
    assert reply.run_id == run.id
    assert reply.provider_payload == {"finish_reason": "stop"}
    types = [e["type"] for e in eventlog.events_all(str(run.id))]
    assert types[:3] == ["run.created", "run.in_progress", "message.created"]
    assert types[-2:] == ["message.completed", "run.completed"]


def test_a_held_lease_keeps_a_second_delivery_out(conversation, redis_url, enqueued, monkeypatch):
    provider = provide(monkeypatch, ScriptedProvider("only once"))
    run = start(conversation)
    Run.objects.filter(pk=run.pk).update(
        status=Run.Status.IN_PROGRESS, lease_expires_at=timezone.now() + timedelta(seconds=60)
    )

    step_run(str(run.id))

    assert provider.calls == []
    assert not Message.objects.filter(role="assistant").exists()


def test_a_step_that_lost_its_lease_stores_nothing(conversation, redis_url, enqueued, monkeypatch):
    run = start(conversation)

    class Usurped(ScriptedProvider):
        async def stream(self, **kwargs: Any) -> AsyncGenerator[StreamEvent, None]:
            # Mid-stream, another worker takes the run over (this one stalled too long).
            await sync_to_async(Run.objects.filter(pk=run.pk).update)(lease_token=None)
            async for event in super().stream(**kwargs):
                yield event

    provide(monkeypatch, Usurped("too late"))
    step_run(str(run.id))

    assert not Message.objects.filter(role="assistant").exists()
    run.refresh_from_db()
    assert run.status == Run.Status.IN_PROGRESS


def test_a_step_that_keeps_crashing_fails_the_run_at_the_attempt_cap(
    conversation, redis_url, enqueued, monkeypatch, settings
):
    settings.PARLEY_RUN_MAX_ATTEMPTS = 3
    provide(monkeypatch, ScriptedProvider(*[RuntimeError("bug")] * 3))
    run = start(conversation)

    for _ in range(3):
        step_run(str(run.id))
        run.refresh_from_db()
        assert run.status == Run.Status.IN_PROGRESS
        assert run.lease_token is None  # handed back for a retry
    assert enqueued == [str(run.id)] * 4  # the first step, then a retry after each crash
    step_run(str(run.id))

    run.refresh_from_db()
    assert run.status == Run.Status.FAILED
    assert run.error is not None
    assert run.error["code"] == "attempts_exhausted"
    assert [m.role for m in conversation.messages.all()] == ["user"]
    assert eventlog.events_all(str(run.id))[-1]["type"] == "run.failed"


def test_cancelling_a_queued_run_ends_it_at_once(conversation, redis_url, enqueued):
    run = start(conversation)

    engine.run_cancel(run=run)

    run.refresh_from_db()
    assert run.status == Run.Status.CANCELLED
    assert eventlog.events_all(str(run.id))[-1]["type"] == "run.cancelled"
    # A worker that gets the step later finds nothing to do.
    step_run(str(run.id))
    run.refresh_from_db()
    assert run.status == Run.Status.CANCELLED


def test_a_cancel_requested_before_a_step_stops_the_run(
    conversation, redis_url, enqueued, monkeypatch
):
    provider = provide(monkeypatch, ScriptedProvider("never said"))
    run = start(conversation)
    Run.objects.filter(pk=run.pk).update(
        status=Run.Status.IN_PROGRESS, cancel_requested_at=timezone.now()
    )

    step_run(str(run.id))

    run.refresh_from_db()
    assert run.status == Run.Status.CANCELLED
    assert provider.calls == []


class CancelledMidStream(ScriptedProvider):
    """Asks for a stop (as a user would, through the service) after the first word."""

    async def stream(self, **kwargs: Any) -> AsyncGenerator[StreamEvent, None]:
        run = await Run.objects.aget()
        number = 0
        async for event in super().stream(**kwargs):
            if number == 1:
                await sync_to_async(engine.run_cancel)(run=run)
            number += 1
            yield event
            await asyncio.sleep(0.005)  # a model's pace: the stop lands mid-reply


def test_a_stop_asked_mid_stream_keeps_the_partial_reply(
    conversation, redis_url, enqueued, monkeypatch
):
    monkeypatch.setattr(inflight, "CHECK_SECONDS", 0)
    words = " ".join(f"w{n}" for n in range(200))
    provide(monkeypatch, CancelledMidStream(words))
    run = start(conversation)

    step_run(str(run.id))

    run.refresh_from_db()
    assert run.status == Run.Status.CANCELLED
    reply = conversation.messages.get(role=Message.Role.ASSISTANT)
    assert reply.provider_payload["finish_reason"] == "cancelled"
    assert 0 < len(reply.content) < len(words)


class StoppedMidStream(ScriptedProvider):
    """A slow reply (20 words a second) that asks for a stop after its first word, with
    `request_stop`; notes when the stop was asked and when the upstream was closed."""

    def __init__(self, *replies: str) -> None:
        super().__init__(*replies)
        self.stop_asked_at = self.closed_at = 0.0

    async def request_stop(self, run: Run) -> None:
        raise NotImplementedError

    async def stream(self, **kwargs: Any) -> AsyncGenerator[StreamEvent, None]:
        run = await Run.objects.aget()
        try:
            number = 0
            async for event in super().stream(**kwargs):
                if number == 1:
                    self.stop_asked_at = time.monotonic()
                    await self.request_stop(run)  # may end this stream already
                number += 1
                yield event
                await asyncio.sleep(0.05)
        finally:
            self.closed_at = time.monotonic()


def test_a_stop_ends_the_reply_at_the_next_chunk(conversation, redis_url, enqueued, monkeypatch):
    # The step's own check is far off: only the broadcast stop can end the reply early.
    monkeypatch.setattr(inflight, "CHECK_SECONDS", 30)

    class AskedByUser(StoppedMidStream):
        async def request_stop(self, run: Run) -> None:
            await sync_to_async(engine.run_cancel)(run=run)

    words = " ".join(f"w{n}" for n in range(200))  # ten seconds of reply
    provider = AskedByUser(words)
    provide(monkeypatch, provider)
    run = start(conversation)

    step_run(str(run.id))

    assert provider.closed_at - provider.stop_asked_at < 0.5
    run.refresh_from_db()
    assert run.status == Run.Status.CANCELLED
    reply = conversation.messages.get(role=Message.Role.ASSISTANT)
    assert reply.provider_payload["finish_reason"] == "cancelled"
    assert 0 < len(reply.content) < len(words)


def test_a_stop_whose_broadcast_was_missed_still_ends_the_reply_within_seconds(
    conversation, redis_url, enqueued, monkeypatch
):
    class FlagOnly(StoppedMidStream):
        async def request_stop(self, run: Run) -> None:
            # What run_cancel leaves behind when the broadcast reached nobody.
            await Run.objects.filter(pk=run.pk).aupdate(cancel_requested_at=timezone.now())
            await sync_to_async(eventlog.redis_client().set)(cancel_flag_key(str(run.id)), 1)

    words = " ".join(f"w{n}" for n in range(200))
    provider = FlagOnly(words)
    provide(monkeypatch, provider)
    run = start(conversation)

    step_run(str(run.id))

    # The step looks for the flag once a second (the reply would take ten).
    assert provider.closed_at - provider.stop_asked_at < 3
    run.refresh_from_db()
    assert run.status == Run.Status.CANCELLED
    reply = conversation.messages.get(role=Message.Role.ASSISTANT)
    assert 0 < len(reply.content) < len(words)


def test_a_tool_slower_than_the_lease_keeps_it_and_runs_once(
    conversation, redis_url, enqueued, settings
):
    settings.PARLEY_RUN_LEASE_SECONDS = 1
    settings.PARLEY_TOOL_TIMEOUT_SECONDS = 30
    calls: list[str] = []
    with tools.isolated_registry():

        @tool
        def slow_lookup(context: ToolContext) -> str:
            """Takes three leases' time."""
            calls.append(context.call_id)
            time.sleep(3)
            return "found"

        Conversation.objects.filter(pk=conversation.pk).update(tools=["slow_lookup"])
        conversation.refresh_from_db()
        run = start(conversation)
        enqueued.clear()  # the first step's: this test plays that step's part itself
        # The model's reply asked for the tool (stored by the step before).
        message_append(
            conversation=conversation,
            message=NewMessage(
                role=Message.Role.ASSISTANT,
                tool_calls=[{"id": "call_1", "name": "slow_lookup", "arguments": "{}"}],
                run_id=run.id,
            ),
        )
        Run.objects.filter(pk=run.pk).update(iterations=1)  # counted with the reply

        def step() -> None:
            try:
                step_run(str(run.id))
            finally:
                connection.close()

        worker = threading.Thread(target=step)
        worker.start()
        deadline = time.monotonic() + 10
        while not calls and time.monotonic() < deadline:
            time.sleep(0.02)
        expiries, expired_seen = [], []
        while worker.is_alive():
            time.sleep(0.3)
            # What another worker would do meanwhile: the watchdog sweeps, a redelivered
            # task tries the run.
            expired_seen.append(watchdog.runs_watchdog()["expired"])
            step_run(str(run.id))
            now = timezone.now()
            expires = Run.objects.values_list("lease_expires_at", flat=True).get(pk=run.pk)
            expiries.append((now, expires))
        worker.join()

    assert calls == ["call_1"]
    assert not any(expired_seen)
    assert len(expiries) >= 5
    renewed = [expires for _, expires in expiries if expires is not None]
    assert all(now < expires for now, expires in expiries if expires is not None)
    assert renewed == sorted(renewed)
    assert len(set(renewed)) >= 4  # moved forward while the tool ran
    tool_messages = conversation.messages.filter(role=Message.Role.TOOL)
    assert [m.content for m in tool_messages] == ["found"]
    run.refresh_from_db()
    assert run.attempt == 0  # one attempt, done
    assert enqueued == [str(run.id)]  # only the next step, handed over


def test_the_watchdog_requeues_expired_leases_and_lost_tasks(conversation, redis_url, enqueued):
    expired = start(conversation)
    Run.objects.filter(pk=expired.pk).update(
        status=Run.Status.IN_PROGRESS,
        lease_token=None,
        lease_expires_at=timezone.now() - timedelta(seconds=1),
    )
    other = services.conversation_create(owner=conversation.owner)
    lost = start(other)
    Run.objects.filter(pk=lost.pk).update(updated_at=timezone.now() - timedelta(minutes=5))
    fresh_conversation = services.conversation_create(owner=conversation.owner)
    start(fresh_conversation)  # queued just now: its task is still on its way
    enqueued.clear()

    assert watchdog.runs_watchdog() == {"expired": 1, "stuck": 1}
    assert sorted(enqueued) == sorted([str(expired.id), str(lost.id)])
    # Touched: the next sweep waits a full grace period for the lost one.
    enqueued.clear()
    watchdog.runs_watchdog()
    assert enqueued == [str(expired.id)]


def test_streaming_steps_give_their_turn_back(
    owner, conversation, redis_url, enqueued, settings, monkeypatch
):
    # One turn in the worker: a second run still streams while the first one does.
    settings.PARLEY_WORKER_BUSY_STEPS = 1
    spans: dict[str, list[float]] = {}

    class Slow(ScriptedProvider):
        async def stream(self, **kwargs: Any) -> AsyncGenerator[StreamEvent, None]:
            key = kwargs["messages"][-1]["content"]
            spans[key] = [time.monotonic()]
            await asyncio.sleep(0.5)
            async for event in super().stream(**kwargs):
                yield event
            spans[key].append(time.monotonic())

    provide(monkeypatch, Slow("first reply", "second reply"))
    other = Conversation.objects.create(owner=owner, title="Other")
    runs = [start(conversation, "one"), start(other, "two")]

    def step(run: Run) -> None:
        try:
            step_run(str(run.id))
        finally:
            connection.close()

    threads = [threading.Thread(target=step, args=(run,)) for run in runs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=20)

    assert [Run.objects.get(pk=run.pk).status for run in runs] == ["completed", "completed"]
    (start_one, end_one), (start_two, end_two) = spans["one"], spans["two"]
    # The two streams overlapped.
    assert start_two < end_one
    assert start_one < end_two
