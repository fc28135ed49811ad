"""Exports of conversations with many branches: the JSON export reads short branches
together, the Markdown export lists thousands of alternatives, and a path crossing more
forks than SQLite's expression limit (a thousand terms) still exports in every format."""

import json
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from conversations import services
from conversations.formats import archives, exporting
from conversations.models import Conversation
from tests.support import shapes

pytestmark = pytest.mark.django_db


def queries(call: Callable[[], Any]) -> tuple[int, Any]:
    with CaptureQueriesContext(connection) as captured:
        result = call()
    return len(captured), result


def test_the_json_export_reads_short_branches_together(owner):
    few = services.conversation_import(owner=owner, document=shapes.siblings(20))
    many = services.conversation_import(owner=owner, document=shapes.siblings(600))
    count_few, _ = queries(lambda: exporting.export_json(few))
    count_many, document = queries(lambda: exporting.export_json(many))
    assert count_many == count_few
    assert len(document["branches"]) == len(document["messages"]) == 600


def test_the_markdown_export_lists_more_than_a_thousand_alternatives(owner):
    conversation = services.conversation_import(owner=owner, document=shapes.siblings(1100))
    markdown = "".join(exporting.export_markdown_chunks(conversation))
    assert "Version 1 of 1100 at this point" in markdown
    assert markdown.count("(branch `") == 1099
    assert ": version 1099" in markdown


@pytest.mark.slow
def test_a_path_crossing_more_than_a_thousand_forks_exports_in_every_format(owner):
    conversation = services.conversation_import(owner=owner, document=shapes.staircase(1050))
    last = "step 1050"

    markdown = "".join(exporting.export_markdown_chunks(conversation))
    assert markdown.count("### ") == 1051
    assert last in markdown
    line = json.loads("".join(exporting.export_jsonl_lines([conversation])))
    assert len(line["messages"]) == 1051
    assert exporting.export_json(conversation, version=1)["messages"][-1]["content"] == last
    whole = exporting.export_json(conversation)
    assert len(whole["branches"]) == 1051

    mine = Conversation.objects.filter(pk=conversation.pk)
    archived = b"".join(archives.jsonl_stream(mine))
    assert len(json.loads(archived)["messages"]) == 1051
