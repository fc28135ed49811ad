"""The built-in tools: calculator, current_time, update_draft and search_conversations."""

import dataclasses
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from accounts.models import User
from conversations import services
from conversations.models import Conversation
from conversations.tools import ToolContext, ToolResult
from tests.support.conversations import refetch
from tests.support.tools import owner_context, run

# --- calculator -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("1 + 2 * 3", "7"),
        ("(1 + 2) * 3", "9"),
        ("2 ** 3 ** 2", "512"),
        ("-3 ** 2", "-9"),
        ("(-3) ** 2", "9"),
        ("- -4", "4"),
        ("+5 - -5", "10"),
        ("10 / 4", "2.5"),
        ("10 / 2", "5.0"),
        ("7 // 2", "3"),
        ("-7 // 2", "-4"),
        ("7 % 3", "1"),
        ("0.1 + 0.2", "0.3"),
        ("1.5e3 * 2", "3000.0"),
        ("2 ** -1", "0.5"),
        ("2 ** 100", "1267650600228229401496703205376"),
        ("sqrt(16)", "4.0"),
        ("abs(-3)", "3"),
        ("round(2.567, 2)", "2.57"),
        ("min(3, 1, 2) + max(4, 5)", "6"),
        ("floor(2.7) + ceil(2.1)", "5"),
        ("pi", "3.14159265359"),
        ("2 * e", "5.43656365692"),
        ("log(8, 2)", "3.0"),
        ("  3  ", "3"),
        ("-0.0", "0.0"),
    ],
)
def test_calculator_evaluates(expression, expected):
    assert run("calculator", {"expression": expression}) == ToolResult(expected, False)


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("1 / 0", "division by zero"),
        ("5 // 0", "division by zero"),
        ("5 % 0", "division by zero"),
        ("x + 1", "unknown name 'x'"),
        ("__import__('os').system('true')", "function \"__import__('os').system\" is not"),
        ("__import__('os')", "the function '__import__' is not available"),
        ("open('/etc/passwd')", "the function 'open' is not available"),
        ("(1).__class__", "attribute access is not allowed"),
        ("math.sqrt(4)", "the function 'math.sqrt' is not available"),
        ("math.pi", "attribute access is not allowed"),
        ("lambda: 1", "lambda is not allowed"),
        ("'a' * 3", "'a' is not a number"),
        ("True + 1", "True is not a number"),
        ("1j", "1j is not a number"),
        ("[1, 2]", "List is not allowed"),
        ("1 < 2", "comparisons are not supported"),
        ("1 << 2", "operator LShift is not supported"),
        ("9 ** 9 ** 9", "too large"),
        ("10 ** 100000", "too large"),
        ("(2 ** 4000) * (2 ** 4000)", "too large"),
        ("1e308 * 10", "too large"),
        ("1e999", "too large"),
        ("exp(1000)", "too large"),
        ("(-8) ** 0.5", "not a real number"),
        ("sqrt(-1)", "sqrt(): math domain error"),
        ("max()", "max():"),
        ("sqrt(x=4)", "positional arguments only"),
        ("1 +", "invalid expression"),
        ("", "expression is empty"),
        ("1" + "+1" * 600, "longer than 1000 characters"),
        ("-" * 999 + "1", "nested too deeply"),
    ],
)
def test_calculator_refuses_with_a_clear_error(expression, message):
    result = run("calculator", {"expression": expression})
    assert result.is_error
    assert result.output.startswith("calculator failed: ")
    assert message in result.output


# --- current_time -----------------------------------------------------------------------


@pytest.mark.parametrize("zone", ["Europe/Paris", "Asia/Kolkata", "UTC"])
def test_current_time_in_a_zone(zone):
    result = run("current_time", {"timezone": zone})
    assert not result.is_error
    moment = datetime.fromisoformat(result.output)
    assert moment.utcoffset() is not None
    assert abs(moment - datetime.now(UTC)) < timedelta(minutes=1)
    if zone == "Asia/Kolkata":
        assert moment.utcoffset() == timedelta(hours=5, minutes=30)


def test_current_time_defaults_to_utc():
    moment = datetime.fromisoformat(run("current_time", {}).output)
    assert moment.utcoffset() == timedelta(0)


@pytest.mark.parametrize("zone", ["Mars/Olympus_Mons", "../../etc/passwd", ""])
def test_current_time_refuses_unknown_zones(zone):
    result = run("current_time", {"timezone": zone})
    assert result.is_error
    assert "unknown time zone" in result.output


# --- update_draft -----------------------------------------------------------------------


@pytest.mark.django_db
def test_update_draft_sets_the_draft_as_the_assistant_and_emits(conversation):
    services.conversation_draft_update(conversation=conversation, draft="mine", by_user=True)
    events: list[tuple[str, dict[str, Any]]] = []
    context = owner_context(conversation, emit=lambda t, p: events.append((t, p)))

    result = run("update_draft", {"draft": "Dear Bob,"}, context=context)

    assert result == ToolResult(output="Draft updated (9 characters).", is_error=False)
    stored = refetch(conversation)
    assert (stored.draft, stored.draft_edited) == ("Dear Bob,", False)
    assert events == [("draft.updated", {"draft": "Dear Bob,"})]


@pytest.mark.django_db
def test_update_draft_again_with_the_same_text_is_a_no_op(conversation):
    events: list[tuple[str, dict[str, Any]]] = []
    context = owner_context(conversation, emit=lambda t, p: events.append((t, p)))
    run("update_draft", {"draft": "v1"}, context=context)
    before = refetch(conversation).updated_at

    again = run("update_draft", {"draft": "v1"}, context=context)

    assert not again.is_error
    assert "nothing changed" in again.output
    assert refetch(conversation).updated_at == before
    assert len(events) == 1
    # A resumed call re-publishes: the crashed attempt may have lost its event.
    run("update_draft", {"draft": "v1"}, context=replace_resume(context))
    assert events == [("draft.updated", {"draft": "v1"})] * 2


def replace_resume(context: ToolContext) -> ToolContext:
    return ToolContext(
        call_id=context.call_id,
        is_resume=True,
        conversation=context.conversation,
        user=context.user,
        emit=context.emit,
    )


def recording(conversation: Conversation, call_id: str) -> tuple[ToolContext, list[Any]]:
    events: list[tuple[str, dict[str, Any]]] = []
    context = owner_context(conversation, call_id=call_id, emit=lambda t, p: events.append((t, p)))
    return context, events


@pytest.mark.django_db
def test_a_resumed_update_draft_that_already_wrote_keeps_a_later_user_edit(conversation):
    context, events = recording(conversation, "c1")
    run("update_draft", {"draft": "model's text"}, context=context)
    # The worker died before storing the result; the user edits the draft meanwhile.
    services.conversation_draft_update(conversation=conversation, draft="user's text")
    events.clear()

    result = run("update_draft", {"draft": "model's text"}, context=replace_resume(context))

    assert result == ToolResult(output="Draft updated (12 characters).", is_error=False)
    stored = refetch(conversation)
    assert (stored.draft, stored.draft_edited) == ("user's text", True)
    # Re-published as it is now: the first attempt may have died before publishing.
    assert events == [("draft.updated", {"draft": "user's text"})]


@pytest.mark.django_db
def test_a_fresh_update_draft_writes_even_with_the_last_writers_call_id(conversation):
    context, events = recording(conversation, "c1")
    run("update_draft", {"draft": "model's text"}, context=context)
    services.conversation_draft_update(conversation=conversation, draft="user's text")
    events.clear()

    result = run("update_draft", {"draft": "model's text"}, context=context)

    assert result.output == "Draft updated (12 characters)."
    assert refetch(conversation).draft == "model's text"
    assert events == [("draft.updated", {"draft": "model's text"})]


@pytest.mark.django_db
def test_a_resumed_update_draft_whose_first_attempt_never_wrote_writes(conversation):
    earlier, _ = recording(conversation, "c0")
    run("update_draft", {"draft": "first"}, context=earlier)
    services.conversation_draft_update(conversation=conversation, draft="user's text")
    context, events = recording(conversation, "c1")

    result = run("update_draft", {"draft": "second"}, context=replace_resume(context))

    assert result.output == "Draft updated (6 characters)."
    stored = refetch(conversation)
    assert (stored.draft, stored.draft_edited, stored.draft_call_id) == ("second", False, "c1")
    assert events == [("draft.updated", {"draft": "second"})]


@pytest.mark.django_db
def test_update_draft_that_found_its_text_in_place_is_not_repeated_on_resume(conversation):
    services.conversation_draft_update(conversation=conversation, draft="same")
    context, events = recording(conversation, "c1")
    assert "nothing changed" in run("update_draft", {"draft": "same"}, context=context).output
    services.conversation_draft_update(conversation=conversation, draft="user's text")

    run("update_draft", {"draft": "same"}, context=replace_resume(context))

    assert refetch(conversation).draft == "user's text"
    assert events == [("draft.updated", {"draft": "user's text"})]


@pytest.mark.django_db
def test_update_draft_refuses_an_oversized_draft(conversation, settings):
    settings.PARLEY_MAX_DRAFT_CHARS = 10
    result = run("update_draft", {"draft": "x" * 11}, context=owner_context(conversation))
    assert result.is_error
    assert result.output == ("update_draft failed: draft is 11 characters long; the limit is 10")
    assert refetch(conversation).draft == ""


@pytest.mark.django_db(transaction=True)
def test_update_draft_outside_a_transaction_runs_in_a_worker_thread(conversation):
    events: list[tuple[str, dict[str, Any]]] = []
    context = owner_context(conversation, emit=lambda t, p: events.append((t, p)))
    result = run("update_draft", {"draft": "from a thread"}, context=context)
    assert not result.is_error
    assert refetch(conversation).draft == "from a thread"
    assert events == [("draft.updated", {"draft": "from a thread"})]


def seen_now(conversation: Conversation) -> int:
    """The user's draft edits as a model call starting now would see them."""
    return refetch(conversation).draft_edit_count


@pytest.mark.django_db
def test_update_draft_keeps_a_user_edit_the_model_has_not_seen(conversation):
    context, events = recording(conversation, "c1")
    context = dataclasses.replace(context, draft_edits_seen=seen_now(conversation))
    # The user saves while the model is still working on its reply.
    services.conversation_draft_update(conversation=conversation, draft="user's text")

    result = run("update_draft", {"draft": "model's text"}, context=context)

    assert result.is_error
    assert result.output == (
        "update_draft failed: the user edited the draft while you were working, and their "
        "edit wins: your text was not saved. If the draft still needs changing, call "
        "update_draft again with the complete text, keeping their changes. The draft now "
        'reads: "user\'s text"'
    )
    stored = refetch(conversation)
    # Untouched: the next turn still tells the model about the edit.
    assert (stored.draft, stored.draft_edited, stored.draft_call_id) == ("user's text", True, "")
    assert events == []


@pytest.mark.django_db
def test_update_draft_writes_once_the_model_has_seen_the_users_edit(conversation):
    services.conversation_draft_update(conversation=conversation, draft="user's text")
    context, events = recording(conversation, "c2")
    context = dataclasses.replace(context, draft_edits_seen=seen_now(conversation))

    result = run("update_draft", {"draft": "user's text, merged"}, context=context)

    assert result.output == "Draft updated (19 characters)."
    stored = refetch(conversation)
    assert (stored.draft, stored.draft_edited) == ("user's text, merged", False)
    assert events == [("draft.updated", {"draft": "user's text, merged"})]


@pytest.mark.django_db
def test_update_draft_that_agrees_with_the_users_unseen_edit_is_no_conflict(conversation):
    context, _ = recording(conversation, "c1")
    context = dataclasses.replace(context, draft_edits_seen=seen_now(conversation))
    services.conversation_draft_update(conversation=conversation, draft="same words")

    result = run("update_draft", {"draft": "same words"}, context=context)

    assert not result.is_error
    assert "nothing changed" in result.output
    assert refetch(conversation).draft_edited  # still news for the next turn


@pytest.mark.django_db
def test_the_assistants_own_writes_never_block_its_next_one(conversation):
    # Two update_draft calls in one reply: the first write is the model's, not the user's.
    seen = seen_now(conversation)
    for call_id, text in [("c1", "first"), ("c2", "second")]:
        context, _ = recording(conversation, call_id)
        result = run(
            "update_draft",
            {"draft": text},
            context=dataclasses.replace(context, draft_edits_seen=seen),
        )
        assert not result.is_error
    assert refetch(conversation).draft == "second"


@pytest.mark.django_db
def test_a_resumed_update_draft_that_already_wrote_is_done_despite_a_later_edit(conversation):
    context, events = recording(conversation, "c1")
    context = dataclasses.replace(context, draft_edits_seen=seen_now(conversation))
    run("update_draft", {"draft": "model's text"}, context=context)
    # The worker died before storing the result; the user edits the draft meanwhile.
    services.conversation_draft_update(conversation=conversation, draft="user's text")
    events.clear()

    result = run(
        "update_draft",
        {"draft": "model's text"},
        context=dataclasses.replace(context, is_resume=True),
    )

    # The call did its work the first time: no error for the model, no write now.
    assert result == ToolResult(output="Draft updated (12 characters).", is_error=False)
    assert refetch(conversation).draft == "user's text"
    assert events == [("draft.updated", {"draft": "user's text"})]


# --- search_conversations ---------------------------------------------------------------


@pytest.fixture
def histories(owner, outsider, conversation):
    services.user_message_append(conversation=conversation, content="I saw a Zebra today")
    services.user_message_append(conversation=conversation, content="nothing to see")
    other = services.conversation_create(owner=owner, title="Zoo")
    services.user_message_append(conversation=other, content="zebras are striped")
    secret = services.conversation_create(owner=outsider, title="Secret")
    services.user_message_append(conversation=secret, content="mallory's zebra secret")
    return conversation, other


def search(owner: User, conversation: Conversation, **arguments: Any) -> ToolResult:
    return run("search_conversations", arguments, context=owner_context(conversation))


@pytest.mark.django_db
def test_search_finds_only_the_owners_messages(owner, histories):
    conversation, other = histories
    result = search(owner, conversation, query="zebra")
    assert not result.is_error
    found = json.loads(result.output)
    assert [(f["conversation_title"], f["snippet"]) for f in found] == [
        ("Zoo", "**zebra**s are striped"),
        ("Cats", "I saw a **Zebra** today"),
    ]
    assert found[0] == {
        "conversation_id": str(other.id),
        "conversation_title": "Zoo",
        "seq": 1,
        "role": "user",
        "snippet": "**zebra**s are striped",
    }
    assert "mallory" not in result.output


@pytest.mark.django_db
def test_search_as_the_outsider_sees_only_their_own(outsider, histories):
    secret = Conversation.objects.get(owner=outsider)
    found = json.loads(search(outsider, secret, query="zebra").output)
    assert [f["conversation_id"] for f in found] == [str(secret.id)]


@pytest.mark.django_db
def test_search_limit_and_its_bounds(owner, histories):
    conversation, _ = histories
    assert len(json.loads(search(owner, conversation, query="zebra", limit=1).output)) == 1
    assert len(json.loads(search(owner, conversation, query="zebra", limit="2").output)) == 2
    for bad in (0, 21):
        result = search(owner, conversation, query="zebra", limit=bad)
        assert result.is_error
        assert result.output.startswith("Invalid arguments for search_conversations: limit:")


@pytest.mark.django_db
def test_search_with_an_empty_query_is_an_error(owner, conversation):
    result = search(owner, conversation, query="   ")
    assert result == ToolResult(
        output="search_conversations failed: the query is empty", is_error=True
    )


@pytest.mark.django_db
def test_search_snippets_stay_short_and_show_the_match(owner, conversation):
    content = "lorem ipsum " * 100 + "NEEDLE in the haystack " + "dolor sit " * 100
    services.user_message_append(conversation=conversation, content=content)
    (found,) = json.loads(search(owner, conversation, query="needle").output)
    snippet = found["snippet"]
    assert len(snippet) <= 200
    assert "**NEEDLE** in the haystack" in snippet
    assert snippet.startswith("…")
    assert snippet.endswith("…")
