"""Export contents (JSON v1, Markdown, JSONL) and forks, as a user of the services sees them."""

import json
import re
from typing import Any

import pytest

from conversations import services
from conversations.errors import ValidationFailed
from conversations.formats import exporting
from conversations.models import Conversation, Message
from conversations.services import NewMessage
from tests.support.conversations import refetch, row_counts, tool_call

# --- export contents -----------------------------------------------------------------

ODD_ARGUMENTS = '{"a":1,  "b" : [2]}'
FENCED_RESULT = "Here is code:\n```python\nprint('hi')\n```\nand ````four```` too"


@pytest.fixture
def worked(owner) -> Conversation:
    """A conversation with a tool call whose results arrive around a context event."""
    conversation = services.conversation_create(
        owner=owner, title="Weather and sums", system_prompt="You are terse."
    )
    services.user_message_append(conversation=conversation, content="Add them up, please.")
    services.message_append(
        conversation=conversation,
        message=NewMessage(
            role="assistant",
            content="Let me calculate.",
            tool_calls=[
                tool_call("call_1", "calculator", ODD_ARGUMENTS),
                tool_call("call_2", "current_time", "{}"),
            ],
        ),
    )
    services.message_append(
        conversation=conversation,
        message=NewMessage(
            role="tool", content=FENCED_RESULT, tool_call_id="call_1", name="calculator"
        ),
    )
    services.context_event_add(conversation=conversation, content="User switched to mobile.")
    services.message_append(
        conversation=conversation,
        message=NewMessage(
            role="tool", content="12:00", tool_call_id="call_2", name="current_time"
        ),
    )
    services.message_append(
        conversation=conversation,
        message=NewMessage(role="assistant", content="The total is 3."),
    )
    return refetch(conversation)


def test_json_export_has_the_envelope_and_messages_in_seq_order(worked):
    text = "".join(exporting.export_json_chunks(worked))
    document = json.loads(text)

    assert document["format"] == "parley.conversation"
    assert document["version"] == 2
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?\+00:00", document["exported_at"])
    assert document["conversation"]["title"] == "Weather and sums"
    assert [(m["seq"], m["role"], m["kind"]) for m in document["messages"]] == [
        (1, "user", "message"),
        (2, "assistant", "message"),
        (3, "tool", "message"),
        (4, "system", "event"),
        (5, "tool", "message"),
        (6, "assistant", "message"),
    ]
    calls = document["messages"][1]["tool_calls"]
    assert calls[0] == {"id": "call_1", "name": "calculator", "arguments": ODD_ARGUMENTS}
    assert document["messages"][2]["content"] == FENCED_RESULT


def test_markdown_export_is_readable_and_fences_cannot_be_broken(worked):
    markdown = "".join(exporting.export_markdown_chunks(worked))

    assert markdown.startswith("# Weather and sums\n")
    assert "Add them up, please." in markdown
    assert "Let me calculate." in markdown
    assert "The total is 3." in markdown
    assert "**Tool call** `calculator`" in markdown
    assert ODD_ARGUMENTS in markdown
    # The result holds ``` and ````: only a five-backtick fence keeps it inside one block.
    assert "`````text\n" + FENCED_RESULT + "\n`````" in markdown
    opening = markdown.index("`````text\n")
    closing = markdown.index("\n`````", opening + len("`````text"))
    assert markdown[opening + len("`````text\n") : closing] == FENCED_RESULT


def test_jsonl_export_is_one_openai_chat_per_line(worked, owner):
    other = services.conversation_create(owner=owner, title="Second")
    services.user_message_append(conversation=other, content="line\nbreaks\nstay inside")

    text = "".join(exporting.export_jsonl_lines([worked, refetch(other)]))

    lines = text.split("\n")
    assert lines[-1] == ""  # every line ends with a newline
    chats = [json.loads(line) for line in lines[:-1]]
    assert len(chats) == 2
    assert chats[0] == {
        "messages": [
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": "Add them up, please."},
            {
                "role": "assistant",
                "content": "Let me calculate.",
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "calculator", "arguments": ODD_ARGUMENTS},
                    },
                    {
                        "id": "call_2",
                        "type": "function",
                        "function": {"name": "current_time", "arguments": "{}"},
                    },
                ],
            },
            # Both results directly after their call; the event stored between them follows.
            {"role": "tool", "tool_call_id": "call_1", "content": FENCED_RESULT},
            {"role": "tool", "tool_call_id": "call_2", "content": "12:00"},
            {"role": "system", "content": "User switched to mobile."},
            {"role": "assistant", "content": "The total is 3."},
        ]
    }
    assert chats[1] == {"messages": [{"role": "user", "content": "line\nbreaks\nstay inside"}]}


# --- fork ----------------------------------------------------------------------------


def _rows(conversation: Conversation) -> list[tuple[Any, ...]]:
    return list(
        Message.objects.filter(conversation=conversation)
        .order_by("seq")
        .values_list("id", "seq", "role", "kind", "content", "tool_calls", "tool_call_id")
    )


def test_fork_copies_the_first_messages_and_leaves_the_source_alone(worked):
    source_rows = _rows(worked)

    fork = services.conversation_fork(conversation=worked, at_seq=5)

    fork = refetch(fork)
    fork_rows = _rows(fork)
    assert fork.owner_id == worked.owner_id
    assert fork.forked_from_id == worked.pk
    assert fork.forked_at_seq == 5
    assert fork.message_count == 5
    assert [row[1:] for row in fork_rows] == [row[1:] for row in source_rows[:5]]
    assert not {row[0] for row in fork_rows} & {row[0] for row in source_rows}
    assert _rows(worked) == source_rows
    assert refetch(worked).message_count == 6
    assert exporting.export_json(fork)["conversation"]["forked_from"] == str(worked.pk)


@pytest.mark.parametrize("at_seq", [2, 3, 4], ids=["at-the-call", "one-result-in", "at-the-event"])
def test_fork_inside_a_tool_call_group_is_refused(worked, at_seq):
    before = row_counts()

    with pytest.raises(ValidationFailed) as refused:
        services.conversation_fork(conversation=worked, at_seq=at_seq)

    assert [problem.path for problem in refused.value.problems] == ["$.at_seq"]
    assert "tool call group" in refused.value.problems[0].message
    assert row_counts() == before


@pytest.mark.parametrize("at_seq", [1, 5, 6], ids=["before-the-call", "last-result", "end"])
def test_fork_around_a_tool_call_group_is_allowed(worked, at_seq):
    fork = services.conversation_fork(conversation=worked, at_seq=at_seq)

    assert fork.messages.count() == at_seq


@pytest.mark.parametrize(
    "at_seq", [0, 7, -1, True, "3"], ids=["zero", "past-end", "negative", "bool", "str"]
)
def test_fork_out_of_range_is_refused(worked, at_seq):
    before = row_counts()

    with pytest.raises(ValidationFailed) as refused:
        services.conversation_fork(conversation=worked, at_seq=at_seq)

    assert [problem.path for problem in refused.value.problems] == ["$.at_seq"]
    assert row_counts() == before


def test_fork_after_a_run_that_stopped_mid_tools_is_allowed(owner):
    # The calls never got results (the run stopped), then the user carried on.
    conversation = services.conversation_create(owner=owner)
    services.user_message_append(conversation=conversation, content="Add 1 and 2")
    services.message_append(
        conversation=conversation,
        message=NewMessage(role="assistant", tool_calls=[tool_call("lost")]),
    )
    services.user_message_append(conversation=conversation, content="Never mind")

    fork = services.conversation_fork(conversation=refetch(conversation), at_seq=3)

    assert fork.message_count == 3
    with pytest.raises(ValidationFailed):
        services.conversation_fork(conversation=refetch(conversation), at_seq=2)
