"""Text from the model and from tools cannot be refused, so whatever provider sends it, it
is repaired (a lone surrogate or a NUL becomes U+FFFD, ids and names fit their columns)
before it is streamed, put in the event log or stored: the run completes on every
database and the owner's pages keep answering."""

import json
from collections.abc import AsyncGenerator
from typing import Any

import pytest

from conversations import engine
from conversations.context import HistoryMessage
from conversations.engine import dispatch, eventlog, runner
from conversations.engine.llm.base import (
    Finished,
    ProviderError,
    StreamEvent,
    TextDelta,
    ToolCallArgumentsDelta,
    ToolCallStarted,
    UsageReported,
)
from conversations.engine.unstored import UnstoredRun, unstored_run, unstored_run_go
from conversations.models import Conversation, Run
from conversations.tools import tool_default_names
from conversations.validation import TOOL_CALL_ID_MAX, unstorable_reason
from tests.support.steps import step_run

pytestmark = pytest.mark.django_db(transaction=True)

LONG_ID = "call\x00" + "x" * 400


class HostileProvider:
    """A provider (not the OpenAI one, which repairs on its own) that sends unstorable
    text in every field of its events."""

    name = "hostile"

    def __init__(self, *, fail: bool = False) -> None:
        self.calls = 0
        self.fail = fail

    async def stream(
        self,
        *,
        model: str,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        generation: Any = None,
    ) -> AsyncGenerator[StreamEvent, None]:
        self.calls += 1
        if self.fail:
            raise ProviderError("provider_error", "upstream said \x00 and \ud800")
        if self.calls == 1:
            yield TextDelta("lone \ud800 and NUL \x00 ")
            yield ToolCallStarted(index=0, call_id="call_1\udc00", name="update_draft")
            # JSON escapes: valid text here, unstorable once the tool parses them.
            yield ToolCallArgumentsDelta("call_1\udc00", '{"draft": "a\\ud800\\u0000b"}')
            yield ToolCallStarted(index=1, call_id=LONG_ID, name="no_such\ud800" + "n" * 300)
            yield ToolCallArgumentsDelta(LONG_ID, "{}")
            yield UsageReported(1, 1, 2, details={"cached\ud800": "x\x00"})
            yield Finished("tool_calls\x00")
        else:
            yield TextDelta("done \udfff")
            yield Finished("stop")


@pytest.fixture
def steps(monkeypatch) -> list[str]:
    queue: list[str] = []
    monkeypatch.setattr(dispatch, "step_enqueue", lambda run_id, countdown=0: queue.append(run_id))
    return queue


def run_to_the_end(monkeypatch, steps: list[str], conversation, provider) -> Run:
    monkeypatch.setattr(runner, "provider_get", lambda: provider)
    _, run = engine.run_start(conversation=conversation, content="Go")
    steps.append(str(run.id))
    while steps:
        step_run(steps.pop(0))
    run.refresh_from_db()
    return run


def all_strings(value: Any) -> list[str]:
    """Every string of a JSON-like value, keys included."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for key, item in value.items() for s in [key, *all_strings(item)]]
    if isinstance(value, list):
        return [s for item in value for s in all_strings(item)]
    return []


def assert_storable(value: Any) -> None:
    for text in all_strings(value):
        assert unstorable_reason(text) is None, repr(text)


def test_every_text_from_a_provider_and_its_tools_is_repaired(
    conversation, redis_url, steps, monkeypatch, client
):
    Conversation.objects.filter(pk=conversation.pk).update(tools=["update_draft"])
    conversation.refresh_from_db()

    run = run_to_the_end(monkeypatch, steps, conversation, HostileProvider())

    assert run.status == Run.Status.COMPLETED, run.error
    _, assistant, draft_result, unknown_result, last = conversation.messages.order_by("seq")
    assert assistant.content == "lone \ufffd and NUL \ufffd "
    assert assistant.tool_calls[0] == {
        "id": "call_1\ufffd",
        "name": "update_draft",
        "arguments": '{"draft": "a\\ud800\\u0000b"}',
    }
    assert len(assistant.tool_calls[1]["id"]) == TOOL_CALL_ID_MAX
    assert assistant.provider_payload == {"finish_reason": "tool_calls\ufffd"}
    assert assistant.usage["cached\ufffd"] == "x\ufffd"
    # The tool got repaired text, so the draft is stored rather than refused.
    conversation.refresh_from_db()
    assert conversation.draft == "a\ufffd\ufffdb"
    assert draft_result.tool_call_id == "call_1\ufffd"
    assert draft_result.content.startswith("Draft updated")
    assert unknown_result.tool_call_id == assistant.tool_calls[1]["id"]
    assert unknown_result.content.startswith("Unknown tool")
    assert last.content == "done \ufffd"
    for message in conversation.messages.all():
        assert_storable([message.content, message.tool_calls, message.tool_call_id])
        assert_storable([message.name, message.usage, message.provider_payload])
    assert_storable(run.usage)
    # The event log (what the socket and SSE readers get) holds the same repaired text.
    log = eventlog.events_all(str(run.id))
    assert_storable(log)
    deltas = "".join(e["delta"] for e in log if e["type"] == "message.delta")
    assert "lone \ufffd and NUL \ufffd" in deltas
    # And the owner's pages answer.
    client.force_login(conversation.owner)
    base = f"/api/v1/conversations/{conversation.pk}"
    for url in (f"{base}/", f"{base}/messages/", f"{base}/export/", f"{base}/export/?format=jsonl"):
        response = client.get(url)
        assert response.status_code == 200, url
        if response.streaming:
            b"".join(response.streaming_content).decode("utf-8")


def test_a_provider_error_quoting_unstorable_text_fails_the_run_cleanly(
    conversation, redis_url, steps, monkeypatch
):
    run = run_to_the_end(monkeypatch, steps, conversation, HostileProvider(fail=True))

    assert run.status == Run.Status.FAILED
    assert run.error == {"code": "provider_error", "message": "upstream said \ufffd and \ufffd"}
    assert_storable(eventlog.events_all(str(run.id)))


def test_a_reply_kept_nowhere_is_repaired_too(owner):
    run, scratch = unstored_run(owner=owner, model="m", tools=tool_default_names())
    sink = UnstoredRun(run=run, conversation=scratch, before=[HistoryMessage("user", "Hi")])
    unstored_run_go(sink, provider=HostileProvider(), label="test")

    assert sink.kept[0]["content"] == "lone \ufffd and NUL \ufffd "
    assert_storable([sink.kept, sink.events, run.usage, scratch.draft])
    assert json.dumps(sink.kept, ensure_ascii=False).encode("utf-8")
