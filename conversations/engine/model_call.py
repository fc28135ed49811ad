"""A stored run's model step: the input read and the stream started on the step's worker
thread; the stream then goes to the process's streaming loop and the thread is free
(engine/inflight.py); the reply is settled (engine/loop.py, `reply_settle`) on a store
thread once the stream has ended.
"""

import concurrent.futures
from collections.abc import Callable

from conversations.engine.inflight import InFlightReply, in_flight
from conversations.engine.lease import release_connection
from conversations.engine.llm.base import Provider
from conversations.engine.loop import model_request, reply_settle, reply_stream
from conversations.engine.step import Step
from conversations.engine.turns import turns
from conversations.models import Message, Run


def model_call_start(
    step: Step, *, provider: Provider, guard: Callable[[Step, Callable[[], None]], None]
) -> concurrent.futures.Future[None]:
    """Start the model call of `step`: its future resolves once the reply is stored (or
    the step's trouble handled by `guard`, the runner's step guard)."""
    run = step.run
    # The conversation was read with the lease, a moment ago, with the draft the model is
    # about to see.
    request = model_request(step, label=f"run {run.id}")
    # Queried only after a first call (a first step has no reply to look for).
    if run.iterations == 0 or not _words_said(run):
        # No words yet (a first call may only ask for tools): these end the user's wait.
        step.writer.first_token_since = run.created_at.timestamp()
    release_connection()

    def on_end(reply: InFlightReply) -> None:
        with turns.taken():
            guard(step, lambda: reply_settle(step, request, reply.result()))

    stream = reply_stream(step, request, provider=provider)
    return in_flight.start(InFlightReply(stream=stream, lease=step.lease, on_end=on_end))


def _words_said(run: Run) -> bool:
    """Whether a reply of the run with words in it is stored already."""
    replies = Message.objects.filter(run=run, role=Message.Role.ASSISTANT).exclude(content="")
    return replies.exists()
