"""A path crossing more forks than one query may name (SQLite refuses a WHERE of more
than a thousand terms): the model's history, a fork, a replaced message and the search
for the last message of a kind read it a few hundred segments a query."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from conversations import selectors, services
from conversations.models import Branch, Conversation, Message
from conversations.selectors.branches import path_last
from conversations.services import NewMessage
from tests.support import shapes

pytestmark = [pytest.mark.django_db, pytest.mark.slow]

DEPTH = 1050


@pytest.fixture
def deep(owner) -> Conversation:
    return services.conversation_import(owner=owner, document=shapes.staircase(DEPTH))


def test_the_history_and_the_last_message_of_a_kind_read_across_every_fork(deep):
    branch = selectors.branch_active(conversation=deep)
    history = selectors.history_tail(conversation=deep, max_messages=2000)
    assert [row.content for row in history] == [f"step {i}" for i in range(DEPTH + 1)]

    with CaptureQueriesContext(connection) as captured:
        found = path_last(branch, at_most=branch.message_count, role="tool")
    assert found is None
    assert len(captured) <= 5
    first = path_last(branch, at_most=branch.message_count, content="step 0")
    assert first is not None
    assert first.seq == 1


def test_a_fork_and_a_replaced_message_copy_a_path_across_every_fork(deep):
    branch = selectors.branch_active(conversation=deep)
    fork = services.conversation_fork(conversation=deep, at_seq=branch.message_count)
    copied = Message.objects.filter(conversation=fork).order_by("seq")
    assert [m.content for m in copied] == [f"step {i}" for i in range(DEPTH + 1)]

    first = Message.objects.get(conversation=deep, seq=1)
    replaced = services.message_replace(
        conversation=deep,
        message=first,
        replacement=NewMessage(role="user", content="step 0, again"),
    )
    path = selectors.message_page(
        conversation=deep, after=DEPTH - 5, limit=50, branch=Branch.objects.get(pk=replaced.pk)
    )
    assert [m.content for m in path.items][-1] == f"step {DEPTH}"
    assert replaced.message_count == DEPTH + 1
