"""Reading an import costs work in proportion to the document: open tool calls are not
copied per branch, thinking shared by many replies cannot blow a conversion up past the
import limit, and a very long chain converts, stores and exports."""

import json
from typing import Any

import pytest

from conversations import services, tool_pairing
from conversations.errors import ValidationFailed
from conversations.formats import exporting
from conversations.formats.chatgpt import chatgpt_conversation_convert
from conversations.formats.importing import parse_export
from tests.support import shapes
from tests.support.chatgpt import Chat


def test_open_calls_are_carried_along_the_tree_not_copied_per_branch(monkeypatch):
    copied = {"ids": 0}
    made = tool_pairing.OpenCalls.__init__

    def counting(self: Any, ids: Any = ()) -> None:
        ids = list(ids)
        copied["ids"] += len(ids)
        made(self, ids)

    monkeypatch.setattr(tool_pairing.OpenCalls, "__init__", counting)
    parsed = parse_export(shapes.open_calls(1000))
    assert len(parsed.branches or []) == 1001
    assert copied["ids"] <= 2 * 1000


def test_a_result_on_one_branch_does_not_answer_the_same_call_on_another():
    document = json.loads(shapes.open_calls(3))
    # The second branch answers the call the first answered: on its own path it is open.
    document["messages"][3]["tool_call_id"] = "c0"
    parse_export(json.dumps(document))
    # Answering it twice on one path is refused, by the path of the second answer.
    first, second = document["branches"][1], document["branches"][2]
    second["parent_id"], second["fork_seq"] = first["id"], 3
    document["messages"][3]["seq"] = 4
    with pytest.raises(ValidationFailed) as refused:
        parse_export(json.dumps(document))
    assert [p.path for p in refused.value.problems] == ["$.messages[3].tool_call_id"]


def test_thinking_shared_by_many_replies_stops_at_the_import_limit(settings):
    settings.PARLEY_IMPORT_MAX_BYTES = 100_000
    chat = Chat()
    node = chat.add("root", "user", "think")
    thought = {"content_type": "thoughts", "thoughts": [{"summary": "s", "content": "x" * 5000}]}
    node = chat.add(node, "assistant", thought)
    for index in range(400):
        chat.add(node, "assistant", f"answer {index}")
    with pytest.raises(ValidationFailed) as refused:
        chatgpt_conversation_convert(chat.conversation())
    problem = refused.value.problems[-1]
    assert problem.path == "$.mapping"
    assert "converts to more than 100000 characters" in problem.message


def test_a_long_chain_of_thoughts_becomes_the_reasoning_of_the_reply_after_it():
    chat = Chat()
    node = chat.add("root", "user", "think")
    for index in range(3000):
        part = {"content_type": "thoughts", "thoughts": [{"summary": "", "content": f"t{index}"}]}
        node = chat.add(node, "assistant", part)
    chat.add(node, "assistant", "done")
    reply = chatgpt_conversation_convert(chat.conversation()).document["messages"][-1]
    assert reply["content"] == "done"
    assert reply["reasoning"].split("\n\n") == [f"t{index}" for index in range(3000)]
    assert len(reply["provider_payload"]["chatgpt_reasoning_nodes"]) == 3000


@pytest.mark.slow
@pytest.mark.django_db
def test_a_chain_of_twenty_thousand_messages_imports_and_exports(owner):
    chat = Chat()
    node = "root"
    for index in range(20_000):
        node = chat.add(node, "user" if index % 2 == 0 else "assistant", f"m{index}")
    report = services.conversations_import_chatgpt(
        owner=owner, document=json.dumps([chat.conversation(current=node)]).encode()
    )
    conversation = report.results[0].conversation
    assert conversation is not None
    assert conversation.message_count == 20_000
    markdown = "".join(exporting.export_markdown_chunks(conversation))
    assert "m19999" in markdown
    document = json.loads("".join(exporting.export_json_chunks(conversation)))
    assert len(document["messages"]) == 20_000
