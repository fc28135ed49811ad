"""A reply that called tools reads as one assistant turn: its tool cards, then its answer,
under one "Parley" — while it streams, after a reload, and across a page of history."""

import pytest
from playwright.sync_api import Page, expect

from conversations import services
from tests.support.browser import Stack, send, wait_idle
from tests.support.fake_openai import Script

pytestmark = pytest.mark.django_db(transaction=True)


def expect_one_turn(page: Page, answer: str) -> None:
    turns = page.locator("article.message.assistant")
    expect(turns).to_have_count(1)
    turn = turns.first
    expect(turn.locator(".role")).to_have_text("Parley")
    expect(turn.locator(".tool-card")).to_have_count(2)
    expect(turn.locator('.tool-card[data-call-id="call_a"] .tool-result')).to_have_text("84")
    expect(turn.locator('.tool-card[data-call-id="call_b"] .tool-result')).to_have_text("5")
    expect(turn.locator(".content")).to_have_text(["Let me work it out.", "", answer])
    # The cards come before the answer.
    order = turn.evaluate(
        """(turn) => [...turn.querySelectorAll(".tool-card, .content")]
                 .filter((e) => !e.matches(".content:empty"))
                 .map((e) => e.dataset.callId || e.textContent.trim())"""
    )
    assert order == ["Let me work it out.", "call_a", "call_b", answer]


def test_tool_calls_and_the_answer_show_as_one_turn_live_and_after_a_reload(
    chat_page: Page, stack: Stack, owner
):
    answer = "12*7 is 84 and 2+3 is 5."
    stack.fake.push(
        Script(
            text="Let me work it out.",
            tool_calls=[("call_a", "calculator", '{"expression": "12*7"}')],
        ),
        Script(tool_calls=[("call_b", "calculator", '{"expression": "2+3"}')]),
        Script(text=answer, tokens_per_second=40),
    )
    chat_page.goto("/chat/")
    send(chat_page, "What are 12*7 and 2+3?")
    wait_idle(chat_page)
    expect_one_turn(chat_page, answer)
    expect(chat_page.locator("article.message")).to_have_count(2)  # the question, the turn

    chat_page.reload()
    expect_one_turn(chat_page, answer)
    expect(chat_page.locator("article.message")).to_have_count(2)

    # The next question starts the next turn.
    expect(chat_page.locator("#connection")).to_have_text("Live")
    stack.fake.push(Script(text="You are welcome."))
    send(chat_page, "Thanks!")
    wait_idle(chat_page)
    turns = chat_page.locator("article.message.assistant")
    expect(turns).to_have_count(2)
    expect(turns.last.locator(".content")).to_have_text(["You are welcome."])
    expect(turns.last.locator(".tool-card")).to_have_count(0)
    assert not chat_page.errors  # type: ignore[attr-defined]


def test_a_turn_cut_by_a_page_of_history_is_one_turn_once_the_older_page_loads(
    chat_page: Page, owner
):
    conversation = services.conversation_create(owner=owner, title="Long sums")
    pairs = [
        services.NewMessage(role="user" if n % 2 else "assistant", content=f"line {n}")
        for n in range(1, 9)
    ]
    turn = [
        services.NewMessage(role="user", content="What is 6*7?"),  # seq 9
        services.NewMessage(
            role="assistant",
            tool_calls=[
                {"id": "call_x", "name": "calculator", "arguments": '{"expression": "6*7"}'}
            ],
        ),  # seq 10, on the older page
        services.NewMessage(role="tool", content="42", tool_call_id="call_x", name="calculator"),
        services.NewMessage(role="assistant", content="It is 42."),  # seq 12
    ]
    later = [
        services.NewMessage(role="user" if n % 2 else "assistant", content=f"line {n}")
        for n in range(13, 61)
    ]
    services.messages_append(conversation=conversation, messages=[*pairs, *turn, *later])
    chat_page.goto(f"/chat/{conversation.pk}/")
    first = chat_page.locator("article.message").first
    expect(first.locator(".tool-card .tool-result")).to_have_text("42")  # its call not yet shown
    chat_page.locator("#messages").evaluate("(box) => { box.scrollTop = 0; }")
    expect(chat_page.get_by_text("line 1", exact=True)).to_be_attached()

    answer = chat_page.locator("article.message.assistant", has_text="It is 42.")
    expect(answer).to_have_count(1)
    expect(answer.locator(".tool-card")).to_have_count(1)
    expect(answer.locator(".tool-args")).to_contain_text('"expression": "6*7"')
    expect(answer.locator(".tool-result")).to_have_text("42")
    texts = chat_page.locator("article.message").evaluate_all(
        "(all) => all.map((a) => a.querySelector('.content:not(:empty)')?.textContent.trim())"
    )
    assert texts[8:11] == ["What is 6*7?", "It is 42.", "line 13"]
    assert len(texts) == 60 - 2  # the tool message and the call's message are in the turn
