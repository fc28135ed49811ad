"""Concurrent appends: real threads, real transactions, one conversation."""

import threading

import pytest
from django.db import connection

from conversations import services
from conversations.models import Conversation, Message

PER_THREAD = 200


@pytest.mark.django_db(transaction=True)
def test_two_writers_get_a_gapless_sequence_without_errors(owner):
    conversation = services.conversation_create(owner=owner)
    errors: list[BaseException] = []
    start = threading.Barrier(2)

    def writer(name: str) -> None:
        try:
            own = Conversation.objects.get(pk=conversation.pk)
            start.wait()
            for i in range(PER_THREAD):
                services.user_message_append(conversation=own, content=f"{name}-{i}")
        except BaseException as exc:  # any error reaching the caller fails the test
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=writer, args=(n,)) for n in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    assert errors == []
    seqs = list(
        Message.objects.filter(conversation=conversation)
        .order_by("seq")
        .values_list("seq", flat=True)
    )
    assert seqs == list(range(1, 2 * PER_THREAD + 1))
    conversation.refresh_from_db()
    assert conversation.message_count == 2 * PER_THREAD
    # Each writer's own messages kept their order.
    for name in ("a", "b"):
        contents = list(
            Message.objects.filter(conversation=conversation, content__startswith=f"{name}-")
            .order_by("seq")
            .values_list("content", flat=True)
        )
        assert contents == [f"{name}-{i}" for i in range(PER_THREAD)]
