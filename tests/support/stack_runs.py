"""Runs that worker processes drive, seen from the test: waiting for one to end, the
messages it stored, and its event log checked against them."""

import time

from conversations.engine import eventlog
from conversations.models import Conversation, Message, Run
from tests.support.workers import Worker

# A reply long enough to be caught mid-stream.
STORY = "The quick brown fox jumps over the lazy dog. " * 12


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


def deltas_seen(run: Run) -> bool:
    return any(e["type"] == "message.delta" for e in eventlog.events_all(str(run.id)))


def assert_log_matches_storage(run: Run) -> None:
    log = eventlog.events_all(str(run.id))
    assert [e["sequence_number"] for e in log] == list(range(len(log)))
    assert log[-1]["type"] == "run.completed"
    texts = eventlog.message_texts(log)
    for message in Message.objects.filter(run=run, role="assistant"):
        assert texts.get(str(message.id), "") == message.content
