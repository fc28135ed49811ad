"""Spreadsheet formula injection: every cell of the admin's CSV export passes one guard,
and the guard catches every way a cell can start a formula."""

import csv
import io

import pytest

from conversations.formats import archives
from conversations.models import Conversation
from conversations.services import NewMessage, messages_append
from tests.support.admin import chat

RISKY = [
    "=1+1",
    "+1",
    "-1",
    "@SUM(A1)",
    "\t=1",
    "\r=1",
    "\n=1",
    "|calc",
    "%0A",
    " =1",
    "   +cmd",
    "\u00a0=1",  # a no-break space
    "\u3000=1",  # an ideographic space
    "\ufeff=1",  # a byte-order mark
    "\u200b=1",  # a zero-width space
    "\u200b \ufeff@x",
    "\uff1d1",  # full-width signs
    "\uff0b1",
    "\uff0d1",
    "\uff20x",
    "\ufe661",  # small forms
    "\ufe621",
]
HARMLESS = ["", "hello", "2 + 2 = 4", "a=b", "1.5", "call_1", "user", "2026-01-01T00:00:00"]


@pytest.mark.parametrize("text", RISKY)
def test_a_cell_that_could_start_a_formula_is_made_text(text):
    assert archives.csv_cell(text) == f"'{text}"


@pytest.mark.parametrize("text", HARMLESS)
def test_other_cells_are_unchanged(text):
    assert archives.csv_cell(text) == text


def test_numbers_and_none_pass_the_guard_too():
    assert archives.csv_cell(None) == ""
    assert archives.csv_cell(-5) == "'-5"
    assert archives.csv_cell(7) == "7"


@pytest.mark.django_db
def test_every_cell_of_every_column_passes_the_guard(owner, monkeypatch):
    conversation = chat(owner, title="T")
    messages_append(
        conversation=conversation,
        messages=[
            NewMessage(
                role="assistant", tool_calls=[{"id": "c1", "name": "calculator", "arguments": "{}"}]
            ),
            NewMessage(role="tool", tool_call_id="c1", name="calculator", content="2"),
        ],
    )
    monkeypatch.setattr(archives, "csv_cell", lambda value: f"GUARDED:{value}")
    queryset = Conversation.objects.filter(pk=conversation.pk)
    text = b"".join(archives.csv_stream(queryset)).decode()
    rows = list(csv.reader(io.StringIO(text, newline="")))
    assert rows[0] == [f"GUARDED:{name}" for name in archives.CSV_COLUMNS]
    assert len(rows) == 1 + 6
    for row in rows:
        assert len(row) == len(archives.CSV_COLUMNS)
        assert all(cell.startswith("GUARDED:") for cell in row), row
