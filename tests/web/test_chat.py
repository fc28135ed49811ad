"""The chat in a real browser: streaming, tool cards, reload mid-reply, stop, draft, safety."""

import pytest
from playwright.sync_api import Page, expect

from conversations.models import Message, Run
from tests.fake_openai import Script
from tests.web.browser import Stack, log_in, record_assistant_states, wait_idle

pytestmark = pytest.mark.django_db(transaction=True)

STORY = "".join(f"word{i} " for i in range(60)).strip()


@pytest.fixture
def chat_page(page: Page, context, stack: Stack, owner) -> Page:
    log_in(context, stack, owner)
    return page


def send(page: Page, text: str) -> None:
    box = page.get_by_label("Message", exact=True)
    box.fill(text)
    box.press("Enter")


def stored_reply(run: Run) -> Message:
    return Message.objects.filter(run=run, role="assistant").order_by("-seq")[0]


def test_a_reply_streams_into_the_page_and_ends_equal_to_the_stored_message(
    chat_page: Page, stack: Stack, owner
):
    stack.fake.push(Script(text=STORY, tokens_per_second=60))
    chat_page.goto("/chat/")
    record_assistant_states(chat_page)
    send(chat_page, "Tell me a story")

    expect(chat_page.locator("#stop")).to_be_visible()
    expect(chat_page.get_by_label("Message", exact=True)).to_be_disabled()
    wait_idle(chat_page)

    run = Run.objects.get(conversation__owner=owner)
    assert run.status == "completed"
    reply = stored_reply(run)
    shown = chat_page.locator("article.message.assistant .content").last.inner_text()
    assert shown == reply.content == STORY
    states = chat_page.evaluate("window.__states")
    partial = [s for s in states if s and s != STORY]
    assert len(partial) >= 2, states
    # The conversation got its address and its title from the first message.
    assert chat_page.url.endswith(f"/chat/{run.conversation_id}/")
    expect(chat_page.locator("#chat-title")).to_have_text("Tell me a story")
    expect(chat_page.locator(".conversation-item").first).to_contain_text("Tell me a story")
    assert not chat_page.errors  # type: ignore[attr-defined]
