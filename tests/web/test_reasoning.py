"""A reasoning model's thoughts in a real browser: "Thinking…" while it thinks, then a
collapsed "Thought for N s" above the answer that opens to the thoughts, live and after a
reload."""

import re

import pytest
from playwright.sync_api import Page, expect

from conversations.models import Message, Run
from tests.support.browser import Stack, wait_idle
from tests.support.fake_openai import Script

pytestmark = pytest.mark.django_db(transaction=True)

THOUGHTS = [
    "Plan: ",
    "greet ",
    "back, ",
    "mention ",
    "<b>no</b> ",
    "markup, ",
    "keep ",
    "it short.",
]
THOUGHT = "".join(THOUGHTS)
ANSWER = "Hello! Nice to meet you."


def test_thoughts_show_collapsed_above_the_reply_and_open_live_and_after_a_reload(
    chat_page: Page, stack: Stack, owner
):
    # Eight thoughts at 8 tokens a second: a second of visible thinking before the answer.
    stack.fake.push(Script(reasoning=THOUGHTS, text=ANSWER, tokens_per_second=8))
    chat_page.goto("/chat/")
    box = chat_page.get_by_label("Message", exact=True)
    box.fill("Hi!")
    box.press("Enter")

    reply = chat_page.locator("article.message.assistant").last
    thoughts = reply.locator("details.reasoning")
    expect(thoughts.locator("summary")).to_have_text("Thinking…")
    expect(thoughts).not_to_have_attribute("open", "")  # collapsed while it thinks, too
    expect(thoughts.locator(".reasoning-text")).to_be_hidden()
    # Opened mid-thought, the thoughts stream in.
    thoughts.locator("summary").click()
    expect(thoughts.locator(".reasoning-text")).to_contain_text("Plan: greet")
    thoughts.locator("summary").click()
    wait_idle(chat_page)

    run = Run.objects.get(conversation__owner=owner)
    stored = Message.objects.get(run=run, role="assistant")
    assert stored.reasoning == THOUGHT
    assert stored.reasoning_ms is not None
    label = f"Thought for {max(1, round(stored.reasoning_ms / 1000))} s"
    expect(thoughts.locator("summary")).to_have_text(label)
    expect(thoughts.locator(".reasoning-text")).to_be_hidden()
    expect(reply.locator(".content")).to_have_text(ANSWER)  # the answer holds no thoughts
    thoughts.locator("summary").click()
    expect(thoughts.locator(".reasoning-text")).to_have_text(THOUGHT)
    assert thoughts.locator(".reasoning-text b").count() == 0  # text, never markup

    chat_page.reload()

    thoughts = chat_page.locator("article.message.assistant").last.locator("details.reasoning")
    expect(thoughts.locator("summary")).to_have_text(label)
    expect(thoughts.locator(".reasoning-text")).to_be_hidden()
    thoughts.locator("summary").click()
    expect(thoughts.locator(".reasoning-text")).to_have_text(THOUGHT)
    expect(chat_page.locator("article.message.user .content")).to_have_text("Hi!")
    assert re.fullmatch(r"Thought for \d+ s", label)
    assert not chat_page.errors  # type: ignore[attr-defined]


def test_a_reply_without_thoughts_shows_no_thinking_element(chat_page: Page, stack: Stack):
    stack.fake.push(Script(text=ANSWER))
    chat_page.goto("/chat/")
    box = chat_page.get_by_label("Message", exact=True)
    box.fill("Hi!")
    box.press("Enter")
    wait_idle(chat_page)

    expect(chat_page.locator("article.message.assistant .content")).to_have_text(ANSWER)
    expect(chat_page.locator("details.reasoning")).to_have_count(0)
