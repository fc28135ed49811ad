"""Import of documents written elsewhere: the minimal form and OpenAI chat fine-tuning
lines are taken, what they leave out is generated, and their meaning is checked as
strictly as an export's (all or nothing). Version 2 exports carry reasoning and the
generation settings; version 1 exports still import."""

import json
from typing import Any

import pytest

from conversations import services
from conversations.errors import ValidationFailed
from conversations.formats import exporting
from conversations.models import Conversation, Message
from conversations.services import NewMessage
from tests.support.conversations import BUILTIN_TOOLS, row_counts
from tests.support.documents import branch_ids_relabelled

pytestmark = pytest.mark.django_db


def imported(owner, document: dict[str, Any] | str) -> Conversation:
    body = document if isinstance(document, str) else json.dumps(document)
    return services.conversation_import(owner=owner, document=body)


def rows(conversation: Conversation) -> list[tuple[Any, ...]]:
    return list(
        conversation.messages.order_by("seq").values_list(
            "seq", "role", "kind", "content", "tool_calls", "tool_call_id", "name"
        )
    )


def refused(owner, document: dict[str, Any]) -> dict[str, str]:
    before = row_counts()
    with pytest.raises(ValidationFailed) as caught:
        imported(owner, document)
    assert row_counts() == before  # nothing half-stored
    return {problem.path: problem.message for problem in caught.value.problems}


def test_the_minimal_form_imports_with_what_is_missing_generated(owner):
    conversation = imported(
        owner,
        {
            "messages": [
                {"role": "user", "content": "What is 6*7?"},
                {
                    "role": "assistant",
                    "content": "",
                    "tool_calls": [
                        {"id": "c1", "name": "calculator", "arguments": '{"expression": "6*7"}'}
                    ],
                },
                {"role": "tool", "tool_call_id": "c1", "name": "calculator", "content": "42"},
                {"role": "assistant", "content": "42."},
            ]
        },
    )
    assert conversation.owner == owner
    assert conversation.title == "What is 6*7?"  # from the first user message
    assert conversation.tools == list(BUILTIN_TOOLS)
    assert conversation.message_count == 4
    assert rows(conversation) == [
        (1, "user", "message", "What is 6*7?", [], "", ""),
        (
            2,
            "assistant",
            "message",
            "",
            [{"id": "c1", "name": "calculator", "arguments": '{"expression": "6*7"}'}],
            "",
            "",
        ),
        (3, "tool", "message", "42", [], "c1", "calculator"),
        (4, "assistant", "message", "42.", [], "", ""),
    ]
    times = list(conversation.messages.order_by("seq").values_list("created_at", flat=True))
    assert times == sorted(times)
    assert len(set(times)) == 4


def test_a_fine_tuning_line_imports_as_one_conversation(owner):
    line = {
        "messages": [
            {"role": "system", "content": "You are terse."},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Time in "},
                    {"type": "text", "text": "Paris?"},
                ],
            },
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_9",
                        "type": "function",
                        "function": {"name": "current_time", "arguments": '{"tz": "Europe/Paris"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_9", "content": "10:00"},
            {"role": "system", "content": "The user is travelling."},
            {"role": "assistant", "content": "Ten o'clock.", "weight": 1},
        ],
        "tools": [{"type": "function", "function": {"name": "current_time"}}],
    }
    conversation = imported(owner, json.dumps(line) + "\n")
    # The leading system message is the preamble, not a history row; a later one is an event.
    assert conversation.system_prompt == "You are terse."
    assert [(seq, role, kind, content) for seq, role, kind, content, *_ in rows(conversation)] == [
        (1, "user", "message", "Time in Paris?"),
        (2, "assistant", "message", ""),
        (3, "tool", "message", "10:00"),
        (4, "system", "event", "The user is travelling."),
        (5, "assistant", "message", "Ten o'clock."),
    ]
    call = conversation.messages.get(seq=2).tool_calls[0]
    assert call == {"id": "call_9", "name": "current_time", "arguments": '{"tz": "Europe/Paris"}'}


def test_our_own_jsonl_export_reads_back(owner, conversation):
    services.user_message_append(conversation=conversation, content="Hello")
    services.message_append(
        conversation=conversation, message=NewMessage(role="assistant", content="Hi there")
    )
    line = "".join(exporting.export_jsonl_lines([conversation]))
    copy = imported(owner, line)
    assert [(r[1], r[3]) for r in rows(copy)] == [("user", "Hello"), ("assistant", "Hi there")]


@pytest.mark.parametrize(
    ("messages", "problem_path", "words"),
    [
        ([{"role": "robot", "content": "hi"}], "$.messages[0].role", "'user'"),
        (
            [{"role": "tool", "tool_call_id": "nope", "content": "42"}],
            "$.messages[0].tool_call_id",
            "answers no earlier",
        ),
        (
            [
                {
                    "role": "user",
                    "content": "x",
                    "tool_calls": [{"id": "c", "name": "calculator", "arguments": "{}"}],
                }
            ],
            "$.messages[0].tool_calls",
            "only assistant",
        ),
        ([{"role": "user", "content": 5}], "$.messages[0].content", ""),
        ([{"role": "user", "content": "hi", "colour": "red"}], "$.messages[0].colour", ""),
        (
            [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}],
            "$.messages[0].content",
            "",
        ),
    ],
    ids=[
        "unknown-role",
        "unanswered-result",
        "user-calls-a-tool",
        "content-not-text",
        "unknown-field",
        "image-part",
    ],
)
def test_short_forms_stay_strict_about_meaning(owner, messages, problem_path, words):
    problems = refused(owner, {"messages": messages})
    matching = [message for path, message in problems.items() if path.startswith(problem_path)]
    assert matching, problems
    assert any(words in message for message in matching), problems


def test_a_short_form_with_an_unknown_top_level_field_is_refused(owner):
    problems = refused(owner, {"messages": [{"role": "user", "content": "hi"}], "colour": "red"})
    assert "$.colour" in problems


def test_version_two_round_trips_reasoning_and_generation_settings(owner, conversation):
    services.conversation_update(conversation=conversation, temperature=0.3, max_output_tokens=512)
    services.user_message_append(conversation=conversation, content="Why?")
    reply = services.message_append(
        conversation=conversation, message=NewMessage(role="assistant", content="Because.")
    )
    Message.objects.filter(pk=reply.pk).update(reasoning="Let me think.", reasoning_ms=4100)
    first = exporting.export_json(Conversation.objects.get(pk=conversation.pk))
    assert first["version"] == 2
    assert first["conversation"]["temperature"] == 0.3
    assert first["messages"][1]["reasoning"] == "Let me think."
    copy = imported(owner, first)
    assert (copy.temperature, copy.max_output_tokens) == (0.3, 512)
    reply = Message.objects.get(conversation=copy, seq=2)
    assert (reply.reasoning, reply.reasoning_ms) == ("Let me think.", 4100)
    first, second = (branch_ids_relabelled(d) for d in (first, exporting.export_json(copy)))
    for document in (first, second):
        document.pop("exported_at")
        document["conversation"].pop("id")
        for message in document["messages"]:
            message.pop("id")
    assert first == second


def test_version_two_settings_out_of_range_are_refused(owner, conversation):
    document = exporting.export_json(conversation)
    document["conversation"]["temperature"] = 3
    document["conversation"]["max_output_tokens"] = 0
    problems = refused(owner, document)
    assert "between 0 and 2" in problems["$.conversation.temperature"]
    assert "between 1 and" in problems["$.conversation.max_output_tokens"]
