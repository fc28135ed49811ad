"""A real worker's logs with LOG_FORMAT=json: JSON lines, Celery's own included, and the
lines of a run's steps carrying the request id that started the run (sent in the step
tasks' headers through the real broker) and the run's ids, without a word of the
conversation."""

import json

import pytest

from config.log_context import log_ids_bound
from conversations import engine
from conversations.models import Run
from tests.support.fake_openai import Script
from tests.support.stack_runs import run_wait

pytestmark = pytest.mark.django_db(transaction=True)

MARKER = "quokka-lantern-5150"


def test_a_workers_json_lines_carry_the_request_and_run_of_each_step(chat, workers, fake_openai):
    worker = workers(LOG_FORMAT="json", LOG_LEVEL="DEBUG")
    fake_openai.push(
        Script(tool_calls=[("call_a", "record_side_effect", f'{{"label": "{MARKER}"}}')]),
        Script(text=f"I recorded {MARKER}."),
    )

    with log_ids_bound(request_id="e2e-request-1"):  # as the web request that starts it
        _, run = engine.run_start(conversation=chat, content=f"Please record {MARKER}")
    run = run_wait(run, workers=[worker])

    assert run.status == Run.Status.COMPLETED, run.error
    text = worker.log()
    # Celery prints its banner itself; every logged line is a JSON object.
    lines = [json.loads(line) for line in text.splitlines() if line.startswith("{")]
    assert any(line["message"].endswith("ready.") for line in lines), text[-3000:]
    steps = [line for line in lines if line.get("run_id") == str(run.id)]
    loggers = {line["logger"] for line in steps}
    # The model calls' input (DEBUG), and Celery's own line for each step that succeeded.
    assert {"conversations.engine.model_input_log", "celery.app.trace"} <= loggers, text[-3000:]
    for line in steps:
        assert line["request_id"] == "e2e-request-1", line
        if line["logger"].startswith("conversations."):  # once the step holds its run
            assert line["conversation_id"] == str(chat.pk), line
            assert line["user_id"] == str(chat.owner_id), line
    # The message, the tool's arguments and output and the reply: none of it, even at DEBUG.
    assert MARKER not in text
