"""Compactions: a stored summary of earlier turns stands in for them in the model's input
(context.compaction_applied), placed on its path when stored (services/compactions.py),
with the stored turns untouched, and carried through an export and an import."""

import json
import uuid

import pytest

from conversations import context, selectors, services
from conversations.errors import ValidationFailed
from conversations.formats import exporting
from conversations.models import Branch, Conversation, Message
from conversations.services import NewMessage
from conversations.sql import HistoryRow

pytestmark = pytest.mark.django_db

SUMMARY = "The user has a grey cat called Tom."


def _row(seq: int, role: str, content: str, **fields) -> HistoryRow:
    return HistoryRow(role, content, [], "", seq=seq, **fields)


def _compaction(seq: int, covers_seq: int, summary: str = SUMMARY) -> HistoryRow:
    return _row(
        seq,
        "system",
        summary,
        kind=Message.Kind.COMPACTION,
        provider_payload={"covers": None, "covers_seq": covers_seq},
    )


def _contents(messages) -> list[str]:
    return [m["content"] for m in messages]


# --- the model's input ------------------------------------------------------------------------


def test_the_newest_compaction_stands_in_for_the_turns_it_covers():
    history = [
        _row(1, "user", "My cat is Tom."),
        _row(2, "assistant", "Noted."),
        _row(3, "user", "He is grey."),
        _compaction(4, covers_seq=3),
        _row(5, "user", "What colour is he?"),
    ]
    sent = context.build_model_input(
        system_prompt="Be brief.", history=history, draft="", token_budget=10_000
    )
    assert sent == [
        {"role": "system", "content": "Be brief."},
        {"role": "system", "content": f"{context.SUMMARY_HEAD}\n{SUMMARY}"},
        {"role": "user", "content": "What colour is he?"},
    ]


def test_turns_after_what_the_summary_covers_and_input_without_a_place_stay():
    history: list[context.StoredMessage] = [
        _row(1, "user", "Covered."),
        _row(2, "user", "Not covered."),
        # A request's own input (no seq on a path) is never covered, wherever it stands.
        NewMessage(role="user", content="Kept from the compaction."),
        _compaction(3, covers_seq=1),
        NewMessage(role="user", content="New."),
    ]
    kept = context.compaction_applied(history)
    assert [m.content for m in kept] == [
        "Not covered.",
        "Kept from the compaction.",
        f"{context.SUMMARY_HEAD}\n{SUMMARY}",
        "New.",
    ]


def test_only_the_newest_compaction_decides_and_an_older_one_it_covers_goes():
    history = [
        _row(1, "user", "One."),
        _compaction(2, covers_seq=1, summary="First summary."),
        _row(3, "user", "Two."),
        _compaction(4, covers_seq=3, summary="Second summary."),
        _row(5, "user", "Three."),
    ]
    assert _contents(
        context.build_model_input(system_prompt="", history=history, draft="", token_budget=10_000)
    ) == [f"{context.SUMMARY_HEAD}\nSecond summary.", "Three."]


def test_a_compaction_covering_nothing_leaves_every_turn():
    history = [_row(1, "user", "One."), _compaction(2, covers_seq=0), _row(3, "user", "Two.")]
    assert _contents(
        context.build_model_input(system_prompt="", history=history, draft="", token_budget=10_000)
    ) == ["One.", f"{context.SUMMARY_HEAD}\n{SUMMARY}", "Two."]


# --- stored on a path -------------------------------------------------------------------------


def _turn(conversation: Conversation) -> list[Message]:
    return services.messages_append(
        conversation=conversation,
        messages=[
            NewMessage(role=Message.Role.USER, content="My cat is Tom."),
            NewMessage(role=Message.Role.ASSISTANT, content="Noted."),
        ],
    )


def _compaction_of(owner, covers) -> NewMessage:
    """A compaction as a door hands it over: the user it was made for, what it covers."""
    return NewMessage(
        role=Message.Role.SYSTEM,
        kind=Message.Kind.COMPACTION,
        content=SUMMARY,
        provider_payload={"covers": str(covers) if covers else None, "user": owner.pk},
    )


def test_a_stored_compaction_leaves_its_turns_out_of_the_model_input_only(conversation, owner):
    _, reply = _turn(conversation)
    [stored] = services.messages_append(
        conversation=conversation, messages=[_compaction_of(owner, reply.pk)]
    )
    services.messages_append(
        conversation=conversation,
        messages=[NewMessage(role=Message.Role.USER, content="What colour is he?")],
    )
    stored.refresh_from_db()
    assert stored.provider_payload == {"covers": str(reply.pk), "covers_seq": 2}
    sent = selectors.conversation_model_input(conversation=conversation)
    assert _contents(sent) == [f"{context.SUMMARY_HEAD}\n{SUMMARY}", "What colour is he?"]
    # The history itself is untouched.
    assert list(conversation.messages.order_by("seq").values_list("content", flat=True)) == [
        "My cat is Tom.",
        "Noted.",
        SUMMARY,
        "What colour is he?",
    ]


@pytest.mark.parametrize(("taken", "left"), [(1, ["Noted."]), (2, ["My cat is Tom."])])
def test_taking_out_a_covered_turn_keeps_the_summary_on_what_is_left(
    conversation, owner, taken, left
):
    first, reply = _turn(conversation)
    services.messages_append(conversation=conversation, messages=[_compaction_of(owner, reply.pk)])
    services.messages_append(
        conversation=conversation, messages=[NewMessage(role=Message.Role.USER, content="Next.")]
    )
    gone = first if taken == 1 else reply
    services.message_replace(conversation=conversation, message=gone, replacement=None)
    conversation.refresh_from_db()
    path = selectors.path_rows(
        branch=selectors.branch_active(conversation=conversation), after=0, last=10
    )
    assert [row["content"] for row in path] == [*left, SUMMARY, "Next."]
    # What is left of the covered turns is still covered, and nothing after them is.
    assert path[1]["provider_payload"]["covers_seq"] == 1
    sent = selectors.conversation_model_input(conversation=conversation)
    assert _contents(sent) == [f"{context.SUMMARY_HEAD}\n{SUMMARY}", "Next."]


def test_a_compaction_of_a_message_off_its_path_covers_nothing(conversation, owner):
    _, reply = _turn(conversation)
    other = services.conversation_create(owner=owner)
    # Another conversation's message, a message of an abandoned branch, an unknown id.
    root = Branch.objects.get(conversation=conversation)
    fork = services.branch_fork(conversation=conversation, source=root, fork_seq=1)
    for covers, target, branch_id in [
        (reply.pk, other, None),
        (reply.pk, conversation, fork.pk),
        (uuid.uuid4(), conversation, None),
    ]:
        [stored] = services.messages_append(
            conversation=target, messages=[_compaction_of(owner, covers)], branch_id=branch_id
        )
        stored.refresh_from_db()
        assert stored.provider_payload == {"covers": str(covers), "covers_seq": 0}


def test_a_compaction_made_for_another_user_is_refused_and_nothing_stored(
    conversation, owner, outsider
):
    _, reply = _turn(conversation)
    with pytest.raises(ValidationFailed) as refused:
        services.message_batch_append(
            conversation=conversation,
            messages=[
                NewMessage(role=Message.Role.USER, content="Hi."),
                _compaction_of(outsider, reply.pk),
            ],
        )
    assert refused.value.problems[0].path == "$.messages[1].encrypted_content"
    assert conversation.messages.count() == 2


# --- export and import ------------------------------------------------------------------------


@pytest.mark.parametrize("version", [1, 2])
def test_a_compaction_survives_an_export_and_an_import(conversation, owner, version):
    _, reply = _turn(conversation)
    services.messages_append(conversation=conversation, messages=[_compaction_of(owner, reply.pk)])
    services.messages_append(
        conversation=conversation,
        messages=[NewMessage(role=Message.Role.USER, content="What colour is he?")],
    )
    document = exporting.export_json(conversation, version=version)
    copy = services.conversation_import(owner=owner, document=json.dumps(document))
    compaction = copy.messages.get(kind=Message.Kind.COMPACTION)
    assert compaction.role == Message.Role.SYSTEM
    assert compaction.content == SUMMARY
    assert compaction.provider_payload == {"covers": str(reply.pk), "covers_seq": 2}
    assert _contents(selectors.conversation_model_input(conversation=copy)) == [
        f"{context.SUMMARY_HEAD}\n{SUMMARY}",
        "What colour is he?",
    ]
    assert "Earlier turns summarised for the model" in "".join(
        exporting.export_markdown_chunks(copy)
    )
