"""The model's input: preamble, stored events, draft notices, trailing draft, truncation."""

import pytest

from conversations import context, selectors, services
from conversations.context import HistoryMessage, build_model_input
from conversations.models import Message
from conversations.services import NewMessage

SYSTEM_PROMPT = "You help users create images. Keep prompts short."


def append(conversation, role, content="", **fields):
    return services.message_append(
        conversation=conversation, message=NewMessage(role=role, content=content, **fields)
    )


# --- the preamble is sent fresh and never stored; later events are stored ----


@pytest.mark.django_db
def test_system_prompt_is_sent_first_but_never_stored(owner):
    conversation = services.conversation_create(owner=owner, system_prompt=SYSTEM_PROMPT)
    services.user_message_append(conversation=conversation, content="Hello")
    append(conversation, "assistant", "Hi!")

    assert not Message.objects.filter(conversation=conversation, role="system").exists()
    model_input = selectors.conversation_model_input(conversation=conversation)
    assert model_input[0] == {"role": "system", "content": SYSTEM_PROMPT}
    assert [m["role"] for m in model_input] == ["system", "user", "assistant"]


@pytest.mark.django_db
def test_changed_system_prompt_applies_to_the_next_turn_only_as_preamble(owner):
    conversation = services.conversation_create(owner=owner, system_prompt="Old preamble")
    services.user_message_append(conversation=conversation, content="Hello")
    services.conversation_update(conversation=conversation, system_prompt="New preamble")

    model_input = selectors.conversation_model_input(conversation=conversation)
    assert model_input[0] == {"role": "system", "content": "New preamble"}
    assert "Old preamble" not in str(model_input)


@pytest.mark.django_db
def test_context_events_after_the_first_message_are_stored_in_order(owner):
    conversation = services.conversation_create(owner=owner, system_prompt=SYSTEM_PROMPT)
    services.user_message_append(conversation=conversation, content="First message")
    append(conversation, "assistant", "Noted.")
    event = services.context_event_add(
        conversation=conversation, content="User has checked in at Harrogate Theatre"
    )
    services.user_message_append(conversation=conversation, content="Tell me about this place")

    stored = list(conversation.messages.order_by("seq").values_list("seq", "role", "kind"))
    assert stored == [
        (1, "user", "message"),
        (2, "assistant", "message"),
        (3, "system", "event"),
        (4, "user", "message"),
    ]
    assert event.seq == 3
    assert selectors.conversation_model_input(conversation=conversation) == [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": "First message"},
        {"role": "assistant", "content": "Noted."},
        {"role": "system", "content": "User has checked in at Harrogate Theatre"},
        {"role": "user", "content": "Tell me about this place"},
    ]


# --- draft edits are announced once; the current draft trails every call ----


@pytest.mark.django_db
def test_the_draft_example_sequence_gives_the_expected_model_input(owner):
    conversation = services.conversation_create(owner=owner, system_prompt=SYSTEM_PROMPT)
    services.user_message_append(conversation=conversation, content="I want a cat in a hat")
    append(conversation, "assistant", "A cat in a hat! Let me ask...")
    services.user_message_append(
        conversation=conversation, content="Make it a tabby cat with a wizard hat"
    )
    reply = "Got it! Here's what I have:\n\nPrompt: a tabby cat wearing a wizard hat, fantasy style"
    append(conversation, "assistant", reply)
    # The assistant set the draft (its update_draft tool): no edit notice for that.
    services.conversation_draft_update(
        conversation=conversation,
        draft="a tabby cat wearing a wizard hat, fantasy style",
        by_user=False,
    )
    # The user edits the draft, then sends the next message.
    edited = "a tabby cat wearing a sparkly wizard hat, fantasy style"
    assert services.conversation_draft_update(conversation=conversation, draft=edited)
    services.user_message_append(
        conversation=conversation, content="Now make the background purple"
    )

    assert selectors.conversation_model_input(conversation=conversation) == [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": "I want a cat in a hat"},
        {"role": "assistant", "content": "A cat in a hat! Let me ask..."},
        {"role": "user", "content": "Make it a tabby cat with a wizard hat"},
        {"role": "assistant", "content": reply},
        {"role": "system", "content": f'[user edited the draft to: "{edited}"]'},
        {"role": "user", "content": "Now make the background purple"},
        {"role": "system", "content": f'[current draft: "{edited}"]'},
    ]
    # The trailing draft context is never stored; the edit notice is, exactly once.
    notices = conversation.messages.filter(kind="draft_edit")
    assert notices.count() == 1
    assert not conversation.messages.filter(content__startswith="[current draft").exists()
    conversation.refresh_from_db()
    assert conversation.draft_edited is False


@pytest.mark.django_db
def test_edit_notice_is_injected_once_per_edit(owner):
    conversation = services.conversation_create(owner=owner)
    services.conversation_draft_update(conversation=conversation, draft="v1")
    services.user_message_append(conversation=conversation, content="one")
    services.user_message_append(conversation=conversation, content="two")
    services.conversation_draft_update(conversation=conversation, draft="v2")
    services.user_message_append(conversation=conversation, content="three")

    kinds = list(conversation.messages.order_by("seq").values_list("kind", "content"))
    assert kinds == [
        ("draft_edit", '[user edited the draft to: "v1"]'),
        ("message", "one"),
        ("message", "two"),
        ("draft_edit", '[user edited the draft to: "v2"]'),
        ("message", "three"),
    ]


@pytest.mark.django_db
def test_saving_an_unchanged_draft_injects_nothing(owner):
    conversation = services.conversation_create(owner=owner)
    services.conversation_draft_update(conversation=conversation, draft="same", by_user=False)
    assert services.conversation_draft_update(conversation=conversation, draft="same") is False
    services.user_message_append(conversation=conversation, content="hi")

    conversation.refresh_from_db()
    assert conversation.draft_edited is False
    assert not conversation.messages.filter(kind="draft_edit").exists()


@pytest.mark.django_db
def test_no_trailing_draft_context_while_the_draft_is_empty(owner):
    conversation = services.conversation_create(owner=owner)
    services.user_message_append(conversation=conversation, content="hi")
    assert selectors.conversation_model_input(conversation=conversation) == [
        {"role": "user", "content": "hi"}
    ]


# --- truncation ----------------------------------------------------------------------


def tool_group(call_ids, text="x" * 40):
    calls = [
        {"id": cid, "name": "calculator", "arguments": '{"expression": "1+1"}'} for cid in call_ids
    ]
    return [HistoryMessage(role="assistant", content="", tool_calls=calls)] + [
        HistoryMessage(role="tool", content=text, tool_call_id=cid) for cid in call_ids
    ]


def test_budget_inside_a_tool_call_group_drops_the_whole_group():
    history = [
        HistoryMessage(role="user", content="old question"),
        *tool_group(["a", "b", "c"]),
        HistoryMessage(role="assistant", content="The answers are 2, 2 and 2."),
        HistoryMessage(role="user", content="thanks"),
    ]
    newest_two = [context.chat_message(m) for m in history[-2:]]
    cost_newest = sum(context.estimate_tokens(m) for m in newest_two)
    group_cost = sum(context.estimate_tokens(context.chat_message(m)) for m in history[1:5])
    # Room for the newest two and half of the group: the group must go entirely.
    budget = cost_newest + group_cost // 2

    result = build_model_input(system_prompt="", history=history, draft="", token_budget=budget)

    assert result == newest_two
    # With room for the whole group it comes back whole, calls and all results together.
    result = build_model_input(
        system_prompt="", history=history, draft="", token_budget=cost_newest + group_cost
    )
    assert [m["role"] for m in result] == ["assistant", "tool", "tool", "tool", "assistant", "user"]


def test_truncation_keeps_newest_messages_and_the_preamble_and_draft():
    history = [HistoryMessage(role="user", content=f"message {i} " + "y" * 36) for i in range(50)]
    per_message = context.estimate_tokens(context.chat_message(history[0]))
    preamble = context.estimate_tokens({"role": "system", "content": "sys"})
    trailing = context.estimate_tokens({"role": "system", "content": '[current draft: "d"]'})
    budget = preamble + trailing + per_message * 10

    result = build_model_input(system_prompt="sys", history=history, draft="d", token_budget=budget)

    assert result[0] == {"role": "system", "content": "sys"}
    assert result[-1] == {"role": "system", "content": '[current draft: "d"]'}
    kept = [m["content"] for m in result[1:-1]]
    assert kept == [m.content for m in history[-10:]]


def test_the_newest_message_is_kept_even_over_budget():
    history = [HistoryMessage(role="user", content="z" * 10_000)]
    result = build_model_input(system_prompt="", history=history, draft="", token_budget=10)
    assert result == [{"role": "user", "content": "z" * 10_000}]


def test_results_whose_call_fell_off_the_tail_are_dropped():
    # The read tail starts in the middle of a group: the orphan result cannot be sent.
    history = [
        HistoryMessage(role="tool", content="2", tool_call_id="a"),
        HistoryMessage(role="assistant", content="It is 2."),
    ]
    result = build_model_input(system_prompt="", history=history, draft="", token_budget=1000)
    assert result == [{"role": "assistant", "content": "It is 2."}]


def test_events_stored_while_tools_ran_follow_the_results():
    history = [
        HistoryMessage(role="user", content="add"),
        HistoryMessage(
            role="assistant",
            tool_calls=[{"id": "a", "name": "calculator", "arguments": "{}"}],
        ),
        HistoryMessage(role="system", content="User checked in"),
        HistoryMessage(role="tool", content="2", tool_call_id="a"),
    ]
    result = build_model_input(system_prompt="", history=history, draft="", token_budget=1000)
    assert [m["role"] for m in result] == ["user", "assistant", "tool", "system"]


def test_a_call_left_without_result_gets_a_placeholder():
    history = [
        HistoryMessage(
            role="assistant", tool_calls=[{"id": "a", "name": "calculator", "arguments": "{}"}]
        ),
        HistoryMessage(role="user", content="Are you still there?"),
    ]
    result = build_model_input(system_prompt="", history=history, draft="", token_budget=1000)
    assert result[1] == {"role": "tool", "tool_call_id": "a", "content": context.MISSING_RESULT}
    assert result[2] == {"role": "user", "content": "Are you still there?"}


@pytest.mark.django_db
def test_model_input_reads_only_a_bounded_tail(owner, settings, django_assert_max_num_queries):
    settings.PARLEY_CONTEXT_MAX_MESSAGES = 5
    conversation = services.conversation_create(owner=owner)
    for i in range(12):
        services.user_message_append(conversation=conversation, content=f"m{i}")

    # The branch (its length) and one range of its messages.
    with django_assert_max_num_queries(2):
        model_input = selectors.conversation_model_input(conversation=conversation)

    assert [m["content"] for m in model_input] == [f"m{i}" for i in range(7, 12)]
