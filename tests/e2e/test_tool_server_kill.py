"""SIGKILL the worker while a tool server's call is in flight: the run still ends, and the
call is sent again only when the server says that is safe (read-only or idempotent);
otherwise the model reads that it may or may not have run."""

import json
from collections.abc import Iterator

import pytest

from conversations import engine
from conversations.engine import watchdog
from conversations.models import Conversation, Message, Run
from conversations.tools.execute import INTERRUPTED
from conversations.tools.mcp_client import Endpoint, mcp_tool_call
from tests.support.fake_openai import Script
from tests.support.mcp_servers import McpServerProcess, mcp_server_start, server_register
from tests.support.stack_runs import run_wait
from tests.support.waiting import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def kit() -> Iterator[McpServerProcess]:
    server = mcp_server_start("varied")
    yield server
    server.stop()


def notes(server: McpServerProcess) -> list[str]:
    """What the server's `record` and `lookup` were sent so far."""
    result = mcp_tool_call(
        endpoint=Endpoint(url=server.url, timeout=10), name="recorded", arguments={}
    )
    text = "".join(getattr(block, "text", "") for block in result.content)
    return text.splitlines()


def recover(run: Run, *, timeout: float = 40) -> Run:
    """What beat does: sweep until a new worker has ended the run."""
    wait_until(
        lambda: (watchdog.runs_watchdog() or True) and not Run.objects.get(pk=run.pk).is_active,
        timeout=timeout,
        interval=0.3,
        what="the run to end after the kill",
    )
    return run_wait(run, timeout=10)


@pytest.mark.parametrize(
    ("tool", "sent_again"),
    [("record", False), ("lookup", True)],
    ids=["not-idempotent-is-not-sent-again", "idempotent-is-sent-again"],
)
def test_a_worker_killed_during_a_server_call(
    chat: Conversation, workers, fake_openai, kit, tool, sent_again
):
    server_register("kit", kit)
    Conversation.objects.filter(pk=chat.pk).update(tools=[*chat.tools, f"kit__{tool}"])
    chat.refresh_from_db()
    first = workers()
    arguments = json.dumps({"note": "ship it", "delay": 4})
    fake_openai.push(
        Script(tool_calls=[("call_kit", f"kit__{tool}", arguments)]), Script(text="Done.")
    )

    _, run = engine.run_start(conversation=chat, content="Note it down")
    wait_until(lambda: notes(kit) == ["ship it"], what="the server to receive the call")
    first.kill()
    workers()
    run = recover(run)

    assert run.status == Run.Status.COMPLETED, run.error
    result = Message.objects.get(conversation=chat, role="tool", tool_call_id="call_kit")
    if sent_again:
        assert result.content == "looked up ship it"
    else:
        assert result.content == f"kit__{tool} failed: {INTERRUPTED}"
        assert notes(kit) == ["ship it"]  # sent once: never again after the kill
    # The model read the result and answered.
    answer = Message.objects.filter(conversation=chat, role="assistant").order_by("seq").last()
    assert answer is not None
    assert answer.content == "Done."
