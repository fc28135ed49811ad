"""The one model-and-tools loop, seen from its three users: a stored run (a worker's
steps), stateless chat and a response with `store: false`. The same script from the
upstream gives the same decisions, the same limit in the same words, the same events and
the same tools, whichever keeps the reply."""

from typing import Any

import pytest

from accounts.models import User
from conversations import engine, services
from conversations.engine import eventlog, stateless
from conversations.engine.loop import CallModel, End, Position, RunTools, loop_next
from conversations.engine.responses import ResponseAsk, response_unstored
from conversations.errors import QuotaExceeded
from conversations.models import Message, Run
from conversations.services import NewMessage
from tests.support.fake_openai import FakeOpenAI, Script
from tests.support.steps import run_to_end

pytestmark = pytest.mark.django_db(transaction=True)

CALC = ("call_1", "calculator", '{"expression": "6*7"}')


def client_run(*names: str) -> Run:
    return Run(client_tools=[{"type": "function", "function": {"name": n}} for n in names])


def call(call_id: str, name: str = "calculator") -> dict[str, str]:
    return {"id": call_id, "name": name, "arguments": "{}"}


@pytest.mark.parametrize(
    ("run", "position", "expected"),
    [
        (Run(), Position(0, None, frozenset()), CallModel),
        (Run(), Position(1, [], frozenset()), End),
        (Run(), Position(1, [call("a"), call("b")], frozenset({"a"})), RunTools),
        (Run(), Position(1, [call("a")], frozenset({"a"})), CallModel),
        (client_run("lookup"), Position(1, [call("a", "lookup")], frozenset()), End),
        (
            client_run("lookup"),
            Position(1, [call("a", "lookup"), call("b")], frozenset()),
            RunTools,
        ),
    ],
    ids=[
        "first-call",
        "answered-without-tools",
        "tools-pending",
        "tools-answered",
        "only-client-tools",
        "server-tools-beside-client-tools",
    ],
)
def test_what_comes_next_follows_from_what_was_kept(run, position, expected):
    assert isinstance(loop_next(run, position), expected)


def test_only_the_server_tools_left_are_run():
    action = loop_next(
        client_run("lookup"),
        Position(1, [call("a"), call("b", "lookup"), call("c")], frozenset({"a"})),
    )

    assert isinstance(action, RunTools)
    assert [c["id"] for c in action.calls] == ["c"]


# --- the three users ------------------------------------------------------------------


def stored(owner: User, enqueued: list[str], content: str) -> tuple[Run, list[dict[str, Any]]]:
    conversation = services.conversation_create(owner=owner, title="Loop")
    _, run = engine.run_start(conversation=conversation, content=content)
    ended = run_to_end(run, enqueued)
    return ended, eventlog.events_all(str(run.pk))


def unstored(owner: User, content: str) -> tuple[Run, list[dict[str, Any]]]:
    ask = ResponseAsk(messages=[NewMessage(role="user", content=content)])
    return response_unstored(user=owner, ask=ask)


def shape(events: list[dict[str, Any]]) -> list[str]:
    """The event types in order, a run of deltas counted once (the writer coalesces them
    by time, so how many there are is not part of the protocol)."""
    types: list[str] = []
    for event in events:
        if not (types and types[-1] == event["type"] and event["type"].endswith("delta")):
            types.append(event["type"])
    return types


def test_a_stored_run_and_a_response_kept_nowhere_emit_the_same_events(
    owner, redis_url, enqueued, upstream: FakeOpenAI
):
    upstream.push(Script(text="Let me work it out.", tool_calls=[CALC]), Script(text="It is 42."))
    run, kept_events = stored(owner, enqueued, "What is 6*7?")
    upstream.push(Script(text="Let me work it out.", tool_calls=[CALC]), Script(text="It is 42."))
    response, nowhere_events = unstored(owner, "What is 6*7?")

    assert (run.status, response.status) == ("completed", "completed")
    assert shape(kept_events) == shape(nowhere_events)
    created = [
        [(e["role"], e["attempt"]) for e in events if e["type"] == eventlog.MESSAGE_CREATED]
        for events in (kept_events, nowhere_events)
    ]
    assert created[0] == created[1] == [("assistant", 1), ("assistant", 1)]
    assert [e["sequence_number"] for e in nowhere_events] == list(range(len(nowhere_events)))
    for kind in (eventlog.MESSAGE_COMPLETED, eventlog.TOOL_RESULT_COMPLETED):
        kept = [e for e in kept_events if e["type"] == kind]
        nowhere = [e for e in nowhere_events if e["type"] == kind]
        assert [sorted(e) for e in kept] == [sorted(e) for e in nowhere]
    completed = [e["message"] for e in nowhere_events if e["type"] == eventlog.MESSAGE_COMPLETED]
    assert sorted(completed[0]) == sorted(
        next(e for e in kept_events if e["type"] == eventlog.MESSAGE_COMPLETED)["message"]
    )
    assert completed[-1]["content"] == "It is 42."
    results = [e for e in nowhere_events if e["type"] == eventlog.TOOL_RESULT_COMPLETED]
    assert [(e["output"], e["is_error"]) for e in results] == [("42", False)]


def test_the_iteration_limit_is_one_limit_in_the_same_words_everywhere(
    owner, redis_url, enqueued, upstream: FakeOpenAI, settings
):
    settings.PARLEY_RUN_MAX_ITERATIONS = 2
    upstream.default_script = Script(tool_calls=[CALC])

    run, _ = stored(owner, enqueued, "Add forever")
    response, events = unstored(owner, "Add forever")
    chat = stateless.stateless_chat(
        user=owner, state=None, system="", messages=[{"role": "user", "content": "Add forever"}]
    )

    assert (run.status, response.status, chat.status) == ("incomplete",) * 3
    assert run.error is not None
    assert run.error["code"] == "max_iterations"
    assert "2 rounds of tool calls" in run.error["message"]
    assert response.error == run.error
    assert events[-1]["run"]["error"] == run.error
    assert chat.error == run.error
    # Two model calls and their tools, on every door.
    assert len(upstream.requests) == 6


def test_stateless_chat_runs_the_draft_tool_and_carries_the_draft_in_its_state(
    owner, redis_url, upstream: FakeOpenAI
):
    upstream.push(
        Script(tool_calls=[("call_d", "update_draft", '{"draft": "Dear Bob,"}')]),
        Script(text="Done."),
        Script(text="Still there."),
    )
    first = stateless.stateless_chat(
        user=owner, state=None, system="", messages=[{"role": "user", "content": "Write to Bob"}]
    )
    second = stateless.stateless_chat(
        user=owner, state=first.state, system="", messages=[{"role": "user", "content": "And?"}]
    )

    assert (first.reply, first.draft) == ("Done.", "Dear Bob,")
    assert second.draft == "Dear Bob,"
    # The next calls end with the draft as it stands, as a stored conversation's do.
    for request in upstream.requests[1:]:
        assert request.messages[-1] == {
            "role": "system",
            "content": '[current draft: "Dear Bob,"]',
        }
    assert stateless.state_decode(second.state, provider="openai", user_id=owner.pk).draft == (
        "Dear Bob,"
    )
    assert not Message.objects.exists()


def test_a_response_kept_nowhere_searches_the_owners_conversations(
    owner, outsider, redis_url, upstream: FakeOpenAI
):
    mine = services.conversation_create(owner=owner, title="Trips")
    services.user_message_append(conversation=mine, content="The lighthouse at Peggy's Cove")
    theirs = services.conversation_create(owner=outsider, title="Secret")
    services.user_message_append(conversation=theirs, content="The lighthouse code is 1234")
    upstream.push(
        Script(tool_calls=[("call_s", "search_conversations", '{"query": "lighthouse"}')]),
        Script(text="Found it."),
    )

    response, events = unstored(owner, "Where was that lighthouse?")

    assert response.status == "completed"
    (result,) = [e for e in events if e["type"] == eventlog.TOOL_RESULT_COMPLETED]
    assert result["is_error"] is False
    assert "Peggy" in result["output"]
    assert "1234" not in result["output"]
    assert Message.objects.count() == 2  # the two set up above, nothing more


def test_the_daily_message_quota_counts_turns_kept_nowhere_as_stored_ones(
    owner, redis_url, enqueued, upstream: FakeOpenAI, settings
):
    settings.PARLEY_MAX_MESSAGES_PER_DAY = 3
    upstream.default_script = Script(text="Fine.")
    say = [{"role": "user", "content": "Hello"}]
    stored(owner, enqueued, "One")
    unstored(owner, "Two")
    stateless.stateless_chat(user=owner, state=None, system="", messages=say)
    asked = len(upstream.requests)

    with pytest.raises(QuotaExceeded) as refused:
        unstored(owner, "Four")
    assert refused.value.code == "message_quota_exceeded"
    with pytest.raises(QuotaExceeded):
        stateless.stateless_chat(user=owner, state=None, system="", messages=say)
    with pytest.raises(QuotaExceeded):
        stored(owner, enqueued, "Six")
    assert len(upstream.requests) == asked  # the model was never asked
    assert Run.objects.count() == 1
