"""ChatGPT import, the converter: a ChatGPT conversation as a Parley document whose
branches are the conversation's tree (whole files and the service are in
tests/conversations/services/test_chatgpt_import.py)."""

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from conversations.errors import Problem, ValidationFailed
from conversations.formats.chatgpt import (
    chatgpt_conversation_convert,
)
from conversations.models import default_tools
from tests.support.chatgpt import (
    CYCLE,
    EDITED,
    LINEAR,
    MISSING_PARENT,
    PICTURE,
    REASONING,
    TOOLS,
    Chat,
    active_path,
    check_document,
    contents,
    document_paths,
    fixture,
    leaves,
)


def convert(conversation: dict[str, Any], base: str = "$") -> dict[str, Any]:
    document = chatgpt_conversation_convert(conversation, base=base).document
    check_document(document)
    return document


def problems_of(conversation: Any, base: str = "$") -> list[Problem]:
    with pytest.raises(ValidationFailed) as failure:
        chatgpt_conversation_convert(conversation, base=base)
    assert failure.value.code == "invalid_import"
    return failure.value.problems


# --- the fixture's conversations ----------------------------------------------------------


def test_a_linear_chat_keeps_its_texts_title_and_times():
    source = fixture()[LINEAR]
    document = convert(source)
    conversation = document["conversation"]
    assert (document["format"], document["version"]) == ("parley.conversation", 2)
    assert conversation["title"] == "Sourdough starter schedule"
    created = datetime.fromisoformat(conversation["created_at"])
    assert created == datetime.fromtimestamp(source["create_time"], tz=UTC)
    assert datetime.fromisoformat(conversation["updated_at"]) == datetime.fromtimestamp(
        source["update_time"], tz=UTC
    )
    assert len(document["branches"]) == 1 == leaves(source["mapping"])
    path = active_path(document)
    assert [m["role"] for m in path] == ["user", "assistant", "user", "assistant"]
    assert [m["seq"] for m in path] == [1, 2, 3, 4]
    assert path[0]["content"].startswith("How often should I feed")
    assert path[3]["content"].startswith("In the fridge, once a week")
    # Message times are ChatGPT's own; the hidden system root is not a message.
    node = next(n for n in source["mapping"].values() if n["message"] and n["children"] == [])
    assert datetime.fromisoformat(path[3]["created_at"]) == datetime.fromtimestamp(
        node["message"]["create_time"], tz=UTC
    )
    assert path[3]["provider_payload"]["chatgpt_node_id"] == node["id"]
    assert path[3]["provider_payload"]["model_slug"] == "gpt-4o"
    assert conversation["model"] == ""
    assert conversation["tools"] == default_tools()
    assert conversation["metadata"] == {
        "source": "chatgpt",
        "chatgpt_id": source["conversation_id"],
        "chatgpt_model": "gpt-4o",
    }
    assert conversation["system_prompt"] == ""
    assert all(m["run_id"] is None and m["usage"] is None for m in document["messages"])


def test_edits_and_regenerations_become_branches_and_current_node_is_active():
    source = fixture()[EDITED]
    document = convert(source)
    branches = document["branches"]
    assert len(branches) == leaves(source["mapping"]) == 4
    root, edit, regenerated_2, regenerated_3 = branches
    # The edited user message forks after the first answer; the regenerated answers fork
    # after the question.
    assert (edit["parent_id"], edit["fork_seq"]) == (root["id"], 2)
    assert (regenerated_2["parent_id"], regenerated_2["fork_seq"]) == (root["id"], 1)
    assert (regenerated_3["parent_id"], regenerated_3["fork_seq"]) == (root["id"], 1)
    paths = document_paths(document)
    question = "Suggest names for a grey kitten."
    assert contents(paths[root["id"]]) == [
        question,
        "- Ash\n- Smokey\n- Pebble",
        "Something French?",
        "- Gris\n- Fumée\n- Cendre",
    ]
    assert contents(paths[edit["id"]]) == [
        question,
        "- Ash\n- Smokey\n- Pebble",
        "Something French, please, and a bit funny.",
        "- Monsieur Moustache\n- Croissant\n- Poussière",
    ]
    assert contents(paths[regenerated_2["id"]]) == [question, "- Earl Grey\n- Misty\n- Flint"]
    assert contents(paths[regenerated_3["id"]]) == [question, "- Storm\n- Dusty\n- Nimbus"]
    # current_node is on the second branch, not the first.
    assert document["conversation"]["active_branch_id"] == edit["id"]
    current = source["mapping"][source["current_node"]]["message"]
    assert active_path(document)[-1]["provider_payload"]["chatgpt_node_id"] == current["id"]
    # The custom instructions are the system prompt, not a message.
    prompt = document["conversation"]["system_prompt"]
    assert "I live in Lyon and have two cats." in prompt
    assert "Keep answers short and use lists." in prompt
    assert not any(m["role"] == "system" for m in document["messages"])


def test_images_and_files_become_placeholders_and_nothing_is_dropped():
    document = convert(fixture()[PICTURE])
    question = active_path(document)[0]
    image = "[image not imported: file-8XkZ2mQfRr1bNn3Tt7Yy9a (1024\u00d7768)]"
    pdf = "[file not imported: care-notes.pdf (file-Q4p9LmW2vC6sHh8Jd1Ee5r)]"
    assert question["content"].startswith(f"{pdf}\n\n{image}\n\n")
    assert question["content"].endswith("What plant is this, and is it safe for cats?")
    # The image was also listed as an attachment: one placeholder for it, not two.
    assert question["content"].count("file-8XkZ2mQfRr1bNn3Tt7Yy9a") == 1
    payload = question["provider_payload"]
    assert payload["chatgpt_assets"][0]["asset_pointer"].endswith("file-8XkZ2mQfRr1bNn3Tt7Yy9a")
    assert payload["chatgpt_attachments"][0]["name"] == "care-notes.pdf"


def test_code_interpreter_calls_become_tool_calls_answered_by_their_output():
    document = convert(fixture()[TOOLS])
    path = active_path(document)
    assert [(m["role"], m["kind"]) for m in path] == [
        ("user", "message"),
        ("assistant", "message"),
        ("tool", "message"),
        ("assistant", "message"),
        ("user", "message"),
        ("assistant", "message"),
        ("tool", "message"),
        ("system", "event"),
        ("assistant", "message"),
    ]
    call = path[1]["tool_calls"][0]
    assert call["name"] == "python"
    assert json.loads(call["arguments"])["code"].startswith("principal = 1000")
    assert path[1]["content"] == ""
    assert (path[2]["tool_call_id"], path[2]["name"], path[2]["content"]) == (
        call["id"],
        "python",
        "1418.04",
    )
    browse = path[5]["tool_calls"][0]
    assert (browse["name"], json.loads(browse["arguments"])) == (
        "browser",
        {"input": 'search("ECB deposit facility rate")'},
    )
    assert path[6]["tool_call_id"] == browse["id"]
    assert "Deposit facility: 2.00%" in path[6]["content"]
    # A second output answers no call: kept as a context event, not dropped.
    assert path[7]["content"].startswith("[browser output]")
    assert "Key ECB interest rates" in path[7]["content"]


def test_thoughts_attach_to_the_reply_and_unanswered_thoughts_stay_as_reasoning():
    source = fixture()[REASONING]
    document = convert(source)
    path = active_path(document)
    assert [m["role"] for m in path] == ["user", "assistant", "user", "assistant"]
    reply = path[1]
    assert reply["content"] == "No: 221 = 13 \u00d7 17."
    assert "Checking small factors" in reply["reasoning"]
    assert "221 / 13 = 17" in reply["reasoning"]
    assert reply["reasoning_ms"] == 4000
    assert reply["provider_payload"]["chatgpt_reasoning_recap"] == "Thought for 4 seconds"
    # Stopped while thinking: an empty reply carrying the thoughts, as Parley stores one.
    stopped = path[3]
    assert stopped["content"] == ""
    assert "Mersenne" in stopped["reasoning"]
    assert stopped["provider_payload"]["chatgpt_reasoning_nodes"] == [source["current_node"]]


def test_a_cycle_or_a_missing_parent_is_refused_with_the_node_path():
    conversations = fixture()
    cycle = problems_of(conversations[CYCLE], base=f"$[{CYCLE}]")
    assert len(cycle) == 2
    assert all(p.path.startswith(f"$[{CYCLE}].mapping.") for p in cycle)
    assert all("cycle" in p.message for p in cycle)
    missing = problems_of(conversations[MISSING_PARENT], base=f"$[{MISSING_PARENT}]")
    assert len(missing) == 1
    assert missing[0].path.startswith(f"$[{MISSING_PARENT}].mapping.")
    assert missing[0].path.endswith(".parent")
    assert "is not in the mapping" in missing[0].message


# --- trees built for one rule each ----------------------------------------------------------


def test_without_a_usable_current_node_the_newest_leaf_is_active():
    chat = Chat()
    question = chat.add(chat.hidden_system(), "user", "Q")
    chat.add(question, "assistant", "late answer", create_time=1_800_000_000.0)
    chat.add(question, "assistant", "second answer", create_time=1_700_000_500.0)
    for current in (None, "no-such-node", 42):
        document = convert(chat.conversation(current=current))
        assert contents(active_path(document)) == ["Q", "late answer"]
    document = convert(chat.conversation(current="root"))
    assert document["conversation"]["active_branch_id"] == document["branches"][0]["id"]


def test_skipped_nodes_keep_seq_gapless_and_their_children_fork_where_they_hang():
    chat = Chat()
    hidden = chat.hidden_system()
    first = chat.add(hidden, "user", "first try")
    chat.add(first, "assistant", "answer one")
    empty_system = chat.add(first, "system", "   ")
    chat.add(empty_system, "assistant", "answer two")
    chat.add(hidden, "user", "second try")
    document = convert(chat.conversation())
    root, answer_two, second_try = document["branches"]
    assert (answer_two["parent_id"], answer_two["fork_seq"]) == (root["id"], 1)
    assert (second_try["parent_id"], second_try["fork_seq"]) == (root["id"], 0)
    paths = document_paths(document)
    assert contents(paths[answer_two["id"]]) == ["first try", "answer two"]
    assert [m["seq"] for m in paths[answer_two["id"]]] == [1, 2]
    assert contents(paths[second_try["id"]]) == ["second try"]


def test_a_visible_system_message_is_a_context_event_and_stray_output_too():
    chat = Chat()
    question = chat.add(chat.hidden_system(), "user", "Hi")
    event = chat.add(question, "system", "The user switched to voice mode.")
    chat.add(event, "tool", "lonely output", name="python")
    path = active_path(convert(chat.conversation()))
    assert [(m["role"], m["kind"], m["content"]) for m in path] == [
        ("user", "message", "Hi"),
        ("system", "event", "The user switched to voice mode."),
        ("system", "event", "[python output]\n\nlonely output"),
    ]


def test_thoughts_before_regenerated_replies_go_with_each_and_a_leaf_thought_once():
    chat = Chat()
    question = chat.add(chat.hidden_system(), "user", "Why?")
    thinking = chat.add(
        question,
        "assistant",
        {"content_type": "thoughts", "thoughts": [{"summary": "S", "content": "because"}]},
    )
    chat.add(thinking, "assistant", "Reply A")
    chat.add(thinking, "assistant", "Reply B")
    document = convert(chat.conversation())
    replies = [m for m in document["messages"] if m["role"] == "assistant"]
    assert [(m["content"], m["reasoning"]) for m in replies] == [
        ("Reply A", "**S**\n\nbecause"),
        ("Reply B", "**S**\n\nbecause"),
    ]
    # A thought whose paths all end without a reply becomes one message, not one per path.
    chat = Chat()
    question = chat.add(chat.hidden_system(), "user", "Why?")
    thinking = chat.add(question, "assistant", {"content_type": "thoughts", "thoughts": "hmm"})
    chat.add(thinking, "system", "", metadata={"is_visually_hidden_from_conversation": True})
    chat.add(thinking, "system", "")
    document = convert(chat.conversation())
    assert [(m["role"], m["content"], m["reasoning"]) for m in document["messages"]] == [
        ("user", "Why?", ""),
        ("assistant", "", "hmm"),
    ]


def test_a_long_title_is_shortened_and_kept_whole_in_the_metadata():
    chat = Chat(title="x" * 300)
    chat.add(chat.hidden_system(), "user", "Hello there")
    conversation = convert(chat.conversation())["conversation"]
    assert len(conversation["title"]) == 200
    assert conversation["title"].endswith("…")
    assert conversation["metadata"]["chatgpt_title"] == "x" * 300
    chat.title = None  # type: ignore[assignment]
    assert convert(chat.conversation())["conversation"]["title"] == "Hello there"


def test_text_over_a_limit_is_reported_not_cut(settings):
    settings.PARLEY_MAX_MESSAGE_CHARS = 10
    chat = Chat()
    chat.add(chat.hidden_system(), "user", "a" * 11, node_id="long-one")
    problems = problems_of(chat.conversation(), base="$[2]")
    assert problems == [
        Problem("$[2].mapping.long-one.message.content", "is 11 characters long; the limit is 10")
    ]


def test_too_many_messages_in_one_conversation_is_refused(settings):
    settings.PARLEY_IMPORT_MAX_MESSAGES = 3
    chat = Chat()
    parent = chat.hidden_system()
    for index in range(5):
        parent = chat.add(parent, "user" if index % 2 == 0 else "assistant", f"m{index}")
    problems = problems_of(chat.conversation())
    assert problems[0].path == "$.mapping"
    assert "the limit is 3" in problems[0].message


@pytest.mark.parametrize(
    ("conversation", "path"),
    [
        ([], "$"),
        ({"title": "no mapping"}, "$.mapping"),
        ({"mapping": []}, "$.mapping"),
        ({"mapping": {"a": "node"}}, "$.mapping.a"),
        ({"mapping": {"a": {"parent": None, "children": "b"}}}, "$.mapping.a.children"),
        ({"mapping": {"a": {"parent": None, "message": {"author": {}}}}}, "$.mapping.a.message"),
        ({"mapping": {"a": {"parent": "b"}, "b": {"parent": "a"}}}, "$.mapping"),
        ({"mapping": {"a": {"parent": None}, "b": {"parent": None}}}, "$.mapping"),
    ],
)
def test_garbage_is_refused_by_path_never_crashes(conversation, path):
    problems = problems_of(conversation)
    assert problems[0].path.startswith(path)


def test_children_naming_unknown_nodes_are_ignored_and_long_chains_are_fine():
    chat = Chat()
    parent = chat.hidden_system()
    chat.mapping[parent]["children"].append("ghost")
    for index in range(3000):
        parent = chat.add(parent, "user" if index % 2 == 0 else "assistant", f"m{index}")
    document = convert(chat.conversation(current=parent))
    assert [m["seq"] for m in active_path(document)] == list(range(1, 3001))


def test_an_empty_conversation_has_only_its_root_branch():
    chat = Chat()
    chat.hidden_system()
    document = convert(chat.conversation())
    assert document["messages"] == []
    assert [b["parent_id"] for b in document["branches"]] == [None]
    assert convert({"mapping": {}})["messages"] == []
