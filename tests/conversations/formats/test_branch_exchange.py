"""Trees of branches in and out: export version 2 with every branch, version 1 with the
active path, Markdown and JSONL of the active path, and an import that rebuilds the tree
or refuses it with every problem by path."""

import json
from typing import Any

import pytest

from conversations import selectors, services
from conversations.errors import ValidationFailed
from conversations.formats import exporting
from conversations.models import Branch, Conversation, Message
from conversations.services import NewMessage
from tests.support.documents import branch_ids_relabelled

pytestmark = pytest.mark.django_db


def add(conversation: Conversation, branch: Branch, *pairs: tuple[str, str]) -> None:
    services.messages_append(
        conversation=conversation,
        messages=[NewMessage(role=role, content=content) for role, content in pairs],
        branch_id=branch.pk,
    )
    branch.refresh_from_db()


def root_of(conversation: Conversation) -> Branch:
    return Branch.objects.get(conversation=conversation, parent__isnull=True)


@pytest.fixture
def tree(conversation: Conversation) -> Conversation:
    """root: u1 a2 u3 a4; regenerated a4 (fork 3); edited u1 (fork 0); a tool call group
    on the regenerated branch. The regenerated branch is active."""
    root = root_of(conversation)
    add(
        conversation, root, ("user", "u1"), ("assistant", "a2"), ("user", "u3"), ("assistant", "a4")
    )
    again = services.branch_fork(conversation=conversation, source=root, fork_seq=3)
    services.messages_append(
        conversation=conversation,
        branch_id=again.pk,
        messages=[
            NewMessage(
                role="assistant",
                tool_calls=[{"id": "c1", "name": "calculator", "arguments": '{"e": "1+1"}'}],
            ),
            NewMessage(role="tool", tool_call_id="c1", name="calculator", content="2"),
            NewMessage(role="assistant", content="a4 again"),
        ],
    )
    edited = services.branch_fork(conversation=conversation, source=root, fork_seq=0)
    add(conversation, edited, ("user", "u1 edited"), ("assistant", "a2 edited"))
    services.branch_switch(conversation=conversation, branch_id=again.pk)
    conversation.refresh_from_db()
    return conversation


def contents(document: dict[str, Any]) -> list[str]:
    return [m["content"] for m in document["messages"]]


def test_version_two_carries_every_branch_and_which_is_active(tree):
    document = exporting.export_json(tree)

    assert document["version"] == 2
    branches = document["branches"]
    assert [b["fork_seq"] for b in branches] == [0, 3, 0]
    assert branches[0]["parent_id"] is None
    assert {b["parent_id"] for b in branches[1:]} == {branches[0]["id"]}
    assert document["conversation"]["active_branch_id"] == branches[1]["id"]
    by_branch = [(m["branch_id"], m["seq"], m["content"]) for m in document["messages"]]
    root, again, edited = (b["id"] for b in branches)
    assert by_branch == [
        (root, 1, "u1"),
        (root, 2, "a2"),
        (root, 3, "u3"),
        (root, 4, "a4"),
        (again, 4, ""),
        (again, 5, "2"),
        (again, 6, "a4 again"),
        (edited, 1, "u1 edited"),
        (edited, 2, "a2 edited"),
    ]


def test_a_tree_round_trips_exactly_apart_from_ids(tree, owner):
    first = exporting.export_json(tree)

    copy = services.conversation_import(owner=owner, document=json.dumps(first))
    second = exporting.export_json(copy)

    def comparable(document: dict[str, Any]) -> dict[str, Any]:
        document = branch_ids_relabelled(document)
        document.pop("exported_at")
        document["conversation"].pop("id")
        for message in document["messages"]:
            message.pop("id")
        return document

    assert comparable(second) == comparable(first)
    assert copy.branch_count == 3
    assert copy.message_count == tree.message_count == 9
    # The copy's active path reads back through the path segments, not just the rows.
    branch = selectors.branch_active(conversation=copy)
    path = selectors.path_messages(branch, after=0, last=branch.message_count)
    assert [m.content for m in path] == ["u1", "a2", "u3", "", "2", "a4 again"]
    page = selectors.message_rows_page(conversation=copy, limit=10).items
    assert page[3]["alternatives"]["count"] == 2


def test_version_one_is_the_active_path_as_one_line_and_imports_back(tree, owner):
    document = exporting.export_json(tree, version=1)

    assert document["version"] == 1
    assert "branches" not in document
    assert "active_branch_id" not in document["conversation"]
    assert contents(document) == ["u1", "a2", "u3", "", "2", "a4 again"]
    assert [m["seq"] for m in document["messages"]] == [1, 2, 3, 4, 5, 6]
    assert all("branch_id" not in m and "reasoning" not in m for m in document["messages"])

    copy = services.conversation_import(owner=owner, document=json.dumps(document))
    assert copy.branch_count == 1
    assert Message.objects.filter(conversation=copy).count() == 6


def test_markdown_and_jsonl_show_the_active_path(tree):
    markdown = "".join(exporting.export_markdown_chunks(tree))
    assert "a4 again" in markdown
    assert "- Messages: 6" in markdown
    # The first message has another version (the edit), shown briefly where it branches.
    assert "*Version 1 of 2 at this point. The others:*" in markdown
    assert "u1 edited" in markdown
    assert "(branch `" in markdown
    assert "a2 edited" not in markdown  # beyond the fork point: not on this path

    (line,) = exporting.export_jsonl_lines([tree])
    said = [m.get("content") for m in json.loads(line)["messages"]]
    assert "a4 again" in said
    assert "a4" not in said
    assert "u1 edited" not in said


def refused(owner, document: dict[str, Any]) -> dict[str, str]:
    with pytest.raises(ValidationFailed) as caught:
        services.conversation_import(owner=owner, document=json.dumps(document))
    return {p.path: p.message for p in caught.value.problems}


def test_an_import_refuses_a_broken_tree_and_stores_nothing(tree, owner):
    good = exporting.export_json(tree)
    before = (Conversation.objects.count(), Branch.objects.count(), Message.objects.count())

    fork_inside_parent = json.loads(json.dumps(good))
    fork_inside_parent["branches"][1]["fork_seq"] = 9
    assert "$.branches[1].fork_seq" in refused(owner, fork_inside_parent)

    two_roots = json.loads(json.dumps(good))
    two_roots["branches"][2]["parent_id"] = None
    assert "$.branches[2].parent_id" in refused(owner, two_roots)

    orphan = json.loads(json.dumps(good))
    orphan["branches"][1]["parent_id"] = orphan["branches"][2]["id"]
    assert "$.branches[1].parent_id" in refused(owner, orphan)

    unknown = json.loads(json.dumps(good))
    unknown["messages"][0]["branch_id"] = "00000000-0000-0000-0000-000000000001"
    assert "$.messages[0].branch_id" in refused(owner, unknown)

    gap = json.loads(json.dumps(good))
    gap["messages"][5]["seq"] = 7
    assert "expected 5" in refused(owner, gap)["$.messages[5].seq"]

    active = json.loads(json.dumps(good))
    active["conversation"]["active_branch_id"] = "00000000-0000-0000-0000-000000000002"
    assert "$.conversation.active_branch_id" in refused(owner, active)

    # A result may only answer a call on its own path, not one on a sibling branch.
    crossed = json.loads(json.dumps(good))
    crossed["messages"][8] = {**crossed["messages"][8], "role": "tool", "tool_call_id": "c1"}
    problems = refused(owner, crossed)
    assert "answers no earlier unanswered tool call" in problems["$.messages[8].tool_call_id"]

    assert (Conversation.objects.count(), Branch.objects.count(), Message.objects.count()) == before


def test_a_version_two_document_without_branches_still_imports_as_one_line(tree, owner):
    document = exporting.export_json(tree)
    document.pop("branches")
    document["conversation"].pop("active_branch_id")
    document["messages"] = [m for m in document["messages"] if m["seq"] <= 4][:4]
    for message in document["messages"]:
        message.pop("branch_id")

    copy = services.conversation_import(owner=owner, document=json.dumps(document))

    assert copy.branch_count == 1
    assert root_of(copy).message_count == 4


def test_branches_written_elsewhere_with_equal_times_keep_their_order(tree, owner):
    document = exporting.export_json(tree)
    same = document["branches"][0]["created_at"]
    for branch in document["branches"]:
        branch["created_at"] = same

    first = exporting.export_json(
        services.conversation_import(owner=owner, document=json.dumps(document))
    )
    second = exporting.export_json(
        services.conversation_import(owner=owner, document=json.dumps(first))
    )

    assert [b["fork_seq"] for b in first["branches"]] == [0, 3, 0]
    assert [m["content"] for m in first["messages"]] == [m["content"] for m in document["messages"]]
    relabelled = [branch_ids_relabelled(d) for d in (first, second)]
    assert relabelled[0]["branches"] == relabelled[1]["branches"]
    assert [m["branch_id"] for m in relabelled[0]["messages"]] == [
        m["branch_id"] for m in relabelled[1]["messages"]
    ]
