"""What an upstream may send that no database or page can take as it is: arguments
nested past any parser, a NUL in an error message, ids and names longer than a column.
Each is made storable (or a tool error the model reads) on every door that keeps a
reply: a stored run, a response kept nowhere and stateless chat."""

from collections.abc import Callable
from typing import Any

import pytest

from accounts.models import User
from conversations import engine, services, validation
from conversations.engine import stateless
from conversations.engine.llm.base import ProviderError
from conversations.engine.responses import ResponseAsk, response_unstored
from conversations.formats import exporting
from conversations.models import Message
from conversations.services import NewMessage
from tests.support.fake_openai import FakeOpenAI, Script
from tests.support.steps import run_to_end

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("redis_url")]

# Deeper than Python's parser recursion allows.
NESTED = '{"expression": ' + "[" * 200_000 + "]" * 200_000 + "}"


def stored(owner: User, enqueued: list[str]) -> tuple[str, dict[str, Any] | None]:
    conversation = services.conversation_create(owner=owner, title="Hostile")
    _, run = engine.run_start(conversation=conversation, content="Go")
    ended = run_to_end(run, enqueued)
    return ended.status, ended.error


def nowhere(owner: User, enqueued: list[str]) -> tuple[str, dict[str, Any] | None]:
    ask = ResponseAsk(messages=[NewMessage(role="user", content="Go")])
    response, _ = response_unstored(user=owner, ask=ask)
    return response.status, response.error


def chat(owner: User, enqueued: list[str]) -> tuple[str, dict[str, Any] | None]:
    try:
        answer = stateless.stateless_chat(
            user=owner, state=None, system="", messages=[{"role": "user", "content": "Go"}]
        )
    except ProviderError as failed:
        # Stateless chat has no run to fail: the door answers with the error itself.
        return "failed", {"code": failed.code, "message": failed.message}
    return answer.status, answer.error


DOORS: list[Callable[..., tuple[str, dict[str, Any] | None]]] = [
    stored,
    nowhere,
    chat,
]


@pytest.mark.parametrize("door", DOORS, ids=lambda door: door.__name__)
def test_arguments_nested_past_any_parser_are_a_tool_error_the_model_reads(
    owner, enqueued, upstream: FakeOpenAI, door
):
    upstream.push(Script(tool_calls=[("call_n", "calculator", NESTED)]), Script(text="Sorry."))

    status, error = door(owner, enqueued)

    assert (status, error) == ("completed", None)
    second = upstream.requests[1].messages
    (tool_reply,) = [m for m in second if m["role"] == "tool"]
    assert tool_reply["tool_call_id"] == "call_n"
    assert "nesting is deeper than" in tool_reply["content"]


@pytest.mark.parametrize("door", DOORS, ids=lambda door: door.__name__)
def test_a_nul_in_an_upstream_error_is_kept_without_it(owner, enqueued, upstream, door):
    upstream.push(Script.http(400, code="bad\x00code", message="broken\x00 request \ud800"))

    status, error = door(owner, enqueued)

    assert status == "failed"
    assert error is not None
    assert "\x00" not in repr(error)
    assert "\\ud800" not in repr(error)
    assert "broken" in error["message"]


LONG_ID = "call_" + "x" * 400
LONG_NAME = "n" * 400


@pytest.mark.parametrize("door", DOORS, ids=lambda door: door.__name__)
def test_call_ids_and_names_longer_than_a_column_are_cut_and_still_paired(
    owner, enqueued, upstream, door
):
    upstream.push(Script(tool_calls=[(LONG_ID, LONG_NAME, "{}")]), Script(text="Done."))

    status, error = door(owner, enqueued)

    assert (status, error) == ("completed", None)
    second = upstream.requests[1].messages
    (asked,) = [m for m in second if m["role"] == "assistant" and m.get("tool_calls")]
    (answer,) = [m for m in second if m["role"] == "tool"]
    call_id = asked["tool_calls"][0]["id"]
    assert len(call_id) <= validation.TOOL_CALL_ID_MAX
    assert len(asked["tool_calls"][0]["function"]["name"]) <= validation.TOOL_NAME_MAX
    assert answer["tool_call_id"] == call_id
    if door is stored:
        tool = Message.objects.get(role="tool")
        assert tool.tool_call_id == call_id
        assert len(tool.name) <= validation.TOOL_NAME_MAX


@pytest.mark.parametrize("door", DOORS, ids=lambda door: door.__name__)
def test_a_call_id_repeated_in_one_reply_gets_a_fresh_one(owner, enqueued, upstream, door):
    upstream.push(
        Script(
            tool_calls=[
                ("dup", "calculator", '{"expression": "1+1"}'),
                ("dup", "calculator", '{"expression": "2+2"}'),
            ]
        ),
        Script(text="Two and four."),
    )

    status, error = door(owner, enqueued)

    assert (status, error) == ("completed", None)
    second = upstream.requests[1].messages
    (asked,) = [m for m in second if m["role"] == "assistant" and m.get("tool_calls")]
    call_ids = [call["id"] for call in asked["tool_calls"]]
    assert call_ids[0] == "dup"
    assert len(set(call_ids)) == 2
    answers = {m["tool_call_id"]: m["content"] for m in second if m["role"] == "tool"}
    assert answers == {call_ids[0]: "2", call_ids[1]: "4"}


def test_a_call_id_already_in_the_conversation_is_not_taken_again(owner, enqueued, upstream):
    # A server numbering calls from 0 in every reply: the second turn's call gets its own
    # id, so each result answers one call, and the conversation exports and imports back.
    conversation = services.conversation_create(owner=owner, title="Numbered")
    for expression, total in (("1+1", "Two."), ("2+2", "Four.")):
        upstream.push(
            Script(tool_calls=[("call_0", "calculator", f'{{"expression": "{expression}"}}')]),
            Script(text=total),
        )
        _, run = engine.run_start(conversation=conversation, content=f"What is {expression}?")
        assert run_to_end(run, enqueued).status == "completed"

    calls = [
        call["id"]
        for message in Message.objects.filter(conversation=conversation, role="assistant")
        for call in message.tool_calls
    ]
    assert calls[0] == "call_0"
    assert len(set(calls)) == 2
    document = "".join(exporting.export_json_chunks(conversation))
    copy = services.conversation_import(owner=owner, document=document)
    assert Message.objects.filter(conversation=copy).count() == 8
