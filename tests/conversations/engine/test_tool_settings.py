"""A response's tool settings and truncation in the one loop, for a stored run (a worker's
steps) and a run kept nowhere alike: the tool choice on the first model call only, the
tools a response allows, the limit on server tool calls, and a history that may not be
cut failing the run instead of losing its oldest turns."""

from typing import Any

import pytest

from accounts.models import User
from conversations import context, engine
from conversations.engine import eventlog
from conversations.engine.responses import ResponseAsk, response_unstored
from conversations.models import Message, Run
from conversations.services import NewMessage
from conversations.sql import HistoryRow
from tests.support.fake_openai import FakeOpenAI, Script
from tests.support.steps import run_to_end

pytestmark = pytest.mark.django_db(transaction=True)

KEPT = ("stored", "nowhere")


def calc(call_id: str, expression: str = "6*7") -> tuple[str, str, str]:
    return (call_id, "calculator", f'{{"expression": "{expression}"}}')


def respond(
    kept: str, owner: User, enqueued: list[str], generation: dict[str, Any], *inputs: str
) -> tuple[Run, list[dict[str, Any]]]:
    """A response to `inputs` (user messages) with `generation`, kept as `kept` says: the
    run as it ended and its events."""
    ask = ResponseAsk(
        messages=[NewMessage(role="user", content=text) for text in inputs], generation=generation
    )
    if kept == "nowhere":
        return response_unstored(user=owner, ask=ask)
    run = engine.response_start(user=owner, ask=ask)
    ended = run_to_end(run, enqueued)
    return ended, eventlog.events_all(str(run.pk))


def results(events: list[dict[str, Any]]) -> list[tuple[str, str, bool]]:
    return [
        (e["call_id"], e["output"], e["is_error"])
        for e in events
        if e["type"] == eventlog.TOOL_RESULT_COMPLETED
    ]


def offered(request: Any) -> list[str]:
    return [tool["function"]["name"] for tool in request.body.get("tools", [])]


@pytest.mark.parametrize("kept", KEPT)
def test_the_tool_choice_holds_for_the_first_model_call_only(
    kept, owner, redis_url, enqueued, upstream: FakeOpenAI
):
    upstream.push(Script(tool_calls=[calc("call_1")]), Script(text="It is 42."))

    run, _ = respond(kept, owner, enqueued, {"tool_choice": "required"}, "What is 6*7?")

    assert run.status == "completed"
    first, second = upstream.requests
    assert first.body["tool_choice"] == "required"
    # Still `required`, the model would call tools until the iteration limit.
    assert second.body["tool_choice"] == "auto"


@pytest.mark.parametrize("kept", KEPT)
def test_past_the_tool_call_limit_calls_are_not_run_and_the_model_must_answer(
    kept, owner, redis_url, enqueued, upstream: FakeOpenAI
):
    asked = [calc("call_1", "1+1"), calc("call_2", "2+2"), calc("call_3", "3+3")]
    upstream.push(Script(tool_calls=asked), Script(text="2 and 4; the third was not run."))

    run, events = respond(kept, owner, enqueued, {"max_tool_calls": 2}, "Add these up.")

    assert run.status == "completed"
    (one, two, three) = results(events)
    assert one == ("call_1", "2", False)
    assert two == ("call_2", "4", False)
    assert (three[0], three[2]) == ("call_3", True)
    assert "Not run" in three[1]
    assert "at most 2 tool calls" in three[1]
    first, second = upstream.requests
    assert "tool_choice" not in first.body
    assert second.body["tool_choice"] == "none"
    # Every call has its result in what the model reads next.
    answered = [m["tool_call_id"] for m in second.body["messages"] if m["role"] == "tool"]
    assert answered == ["call_1", "call_2", "call_3"]


def test_the_limit_counts_over_the_whole_run(owner, redis_url, enqueued, upstream: FakeOpenAI):
    upstream.push(
        Script(tool_calls=[calc("call_1")]),
        Script(tool_calls=[calc("call_2"), calc("call_3")]),
        Script(text="Done."),
    )

    run, events = respond("stored", owner, enqueued, {"max_tool_calls": 2}, "Work it out.")

    assert run.status == "completed"
    assert [(call_id, error) for call_id, _, error in results(events)] == [
        ("call_1", False),
        ("call_2", False),
        ("call_3", True),
    ]
    choices = [request.body.get("tool_choice") for request in upstream.requests]
    assert choices == [None, None, "none"]
    kept = Message.objects.filter(run=run, role=Message.Role.TOOL).order_by("seq")
    assert [m.tool_call_id for m in kept] == ["call_1", "call_2", "call_3"]


def test_a_request_without_a_limit_runs_every_call(
    owner, redis_url, enqueued, upstream: FakeOpenAI
):
    upstream.push(Script(tool_calls=[calc("a"), calc("b"), calc("c")]), Script(text="Done."))

    run, events = respond("stored", owner, enqueued, {}, "Work it out.")

    assert run.status == "completed"
    assert [error for _, _, error in results(events)] == [False, False, False]
    assert "tool_choice" not in upstream.requests[1].body


@pytest.mark.parametrize("kept", KEPT)
def test_only_the_allowed_tools_are_offered_and_run(
    kept, owner, redis_url, enqueued, upstream: FakeOpenAI
):
    clock = ("call_t", "current_time", "{}")
    upstream.push(Script(tool_calls=[calc("call_c"), clock]), Script(text="Done."))
    generation = {"allowed_tools": ["calculator"], "tool_choice": "required"}

    run, events = respond(kept, owner, enqueued, generation, "Sum and time, please.")

    assert run.status == "completed"
    first, second = upstream.requests
    assert offered(first) == offered(second) == ["calculator"]
    assert (first.body["tool_choice"], second.body["tool_choice"]) == ("required", "auto")
    (calculated, timed) = results(events)
    assert calculated == ("call_c", "42", False)
    assert (timed[0], timed[2]) == ("call_t", True)
    assert "not one of the tools this response allows" in timed[1]


LONG = "word " * 80  # about a hundred tokens


@pytest.mark.parametrize("kept", KEPT)
def test_a_history_that_may_not_be_cut_fails_the_run_without_calling_the_model(
    kept, owner, redis_url, enqueued, upstream: FakeOpenAI, settings
):
    settings.PARLEY_CONTEXT_TOKENS = 200

    run, events = respond(kept, owner, enqueued, {"truncation": "disabled"}, LONG, LONG, "And now?")

    assert run.status == "failed"
    assert run.error is not None
    assert run.error["code"] == "context_length_exceeded"
    assert "does not fit" in run.error["message"]
    assert "truncation: auto" in run.error["message"]
    assert upstream.requests == []
    assert eventlog.MESSAGE_CREATED not in [e["type"] for e in events]
    assert events[-1]["type"] == "run.failed"


@pytest.mark.parametrize("kept", KEPT)
def test_by_default_the_oldest_turns_are_dropped_and_the_run_answers(
    kept, owner, redis_url, enqueued, upstream: FakeOpenAI, settings
):
    settings.PARLEY_CONTEXT_TOKENS = 200
    upstream.push(Script(text="Answered."))

    run, _ = respond(kept, owner, enqueued, {}, LONG, LONG, "And now?")

    assert run.status == "completed"
    sent = [m["content"] for m in upstream.requests[0].body["messages"]]
    assert sent[-1] == "And now?"
    assert len(sent) < 3


@pytest.mark.parametrize("kept", KEPT)
def test_a_history_that_fits_is_sent_whole_without_truncation(
    kept, owner, redis_url, enqueued, upstream: FakeOpenAI
):
    upstream.push(Script(text="Answered."))

    run, _ = respond(kept, owner, enqueued, {"truncation": "disabled"}, "One.", "Two.")

    assert run.status == "completed"
    assert [m["content"] for m in upstream.requests[0].body["messages"]] == ["One.", "Two."]


def test_building_the_input_without_truncation_refuses_to_drop_a_turn():
    history = [context.HistoryMessage("user", LONG), context.HistoryMessage("user", "Short.")]

    with pytest.raises(context.HistoryTooLong):
        context.build_model_input(
            system_prompt="", history=history, draft="", token_budget=60, truncate=False
        )
    kept = context.build_model_input(system_prompt="", history=history, draft="", token_budget=60)
    assert [m["content"] for m in kept] == ["Short."]
    # The newest turn alone is never dropped, so it is sent either way.
    alone = context.build_model_input(
        system_prompt="", history=history[:1], draft="", token_budget=60, truncate=False
    )
    assert [m["content"] for m in alone] == [LONG]


def test_a_history_longer_than_the_read_may_not_be_cut_either(
    owner, redis_url, enqueued, upstream: FakeOpenAI, settings
):
    # Short turns that fit the token budget, but more than the history read takes.
    settings.PARLEY_CONTEXT_MAX_MESSAGES = 2

    run, _ = respond("stored", owner, enqueued, {"truncation": "disabled"}, "1.", "2.", "3.")

    assert run.status == "failed"
    assert run.error is not None
    assert run.error["code"] == "context_length_exceeded"
    assert upstream.requests == []


def _row(seq: int, content: str, **fields: Any) -> HistoryRow:
    return HistoryRow("user", content, [], "", seq=seq, **fields)


def test_messages_left_unread_count_unless_a_compaction_covers_them():
    tail = [_row(5, "Five."), _row(6, "Six.")]
    with pytest.raises(context.HistoryTooLong):
        context.build_model_input(
            system_prompt="", history=tail, draft="", token_budget=10_000, truncate=False
        )
    summary = _row(
        4,
        "What came before.",
        kind=context.COMPACTION,
        provider_payload={"covers_seq": 3},
    )
    covered = [summary._replace(role="system"), *tail]
    sent = context.build_model_input(
        system_prompt="", history=covered, draft="", token_budget=10_000, truncate=False
    )
    assert [m["content"] for m in sent] == [
        f"{context.SUMMARY_HEAD}\nWhat came before.",
        "Five.",
        "Six.",
    ]
    # From the path's first message on, nothing was left unread.
    whole = [_row(1, "One."), _row(2, "Two.")]
    assert (
        len(
            context.build_model_input(
                system_prompt="", history=whole, draft="", token_budget=10_000, truncate=False
            )
        )
        == 2
    )
