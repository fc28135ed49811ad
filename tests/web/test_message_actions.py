"""What can be done with a message: copy it (or one code block) to the clipboard, and
fork the conversation at it into a new chat, which opens in place."""

import json

import pytest
from django.test import Client
from playwright.sync_api import Page, Request, expect

from conversations import services
from conversations.models import Conversation
from tests.support.browser import Stack, log_in

pytestmark = pytest.mark.django_db(transaction=True)

REPLY = "Use **print**:\n\n```python\nprint('hi')\nprint('there')\n```\n\nThat is all."


@pytest.fixture
def chat_page(page: Page, context, stack: Stack, owner) -> Page:
    log_in(context, stack, owner)
    context.grant_permissions(["clipboard-read", "clipboard-write"], origin=stack.url)
    return page


def clipboard(page: Page) -> str:
    return page.evaluate("navigator.clipboard.readText()")


def chat_with(owner, title: str, *messages: services.NewMessage) -> Conversation:
    conversation = services.conversation_create(owner=owner, title=title)
    services.messages_append(conversation=conversation, messages=list(messages))
    conversation.refresh_from_db()
    return conversation


def test_copy_a_message_or_a_code_block(chat_page: Page, owner):
    conversation = chat_with(
        owner,
        "Python",
        services.NewMessage(role="user", content="How do I print?\n  Two lines."),
        services.NewMessage(role="assistant", content=REPLY),
    )
    chat_page.goto(f"/chat/{conversation.pk}/")
    reply = chat_page.locator("article.message.assistant")
    expect(reply.locator(".content pre")).to_contain_text("print('hi')")

    # The reply's Copy button appears on hover and copies the Markdown as written.
    actions = reply.locator(".message-actions")
    expect(actions).to_have_css("opacity", "0")
    reply.hover()
    expect(actions).to_have_css("opacity", "1")
    copy = reply.get_by_role("button", name="Copy", exact=True)
    copy.click()
    expect(reply.get_by_role("button", name="Copied", exact=True)).to_be_visible()
    assert clipboard(chat_page) == REPLY
    expect(copy).to_have_text("Copy")  # the feedback is brief

    # From the keyboard: Tab reaches the question's buttons, which show while focused.
    question = chat_page.locator("article.message.user")
    chat_page.mouse.move(0, 0)
    question_copy = question.get_by_role("button", name="Copy", exact=True)
    question_copy.focus()
    expect(question.locator(".message-actions")).to_have_css("opacity", "1")
    chat_page.keyboard.press("Enter")
    expect(question.get_by_role("button", name="Copied", exact=True)).to_be_visible()
    assert clipboard(chat_page) == "How do I print?\n  Two lines."
    chat_page.keyboard.press("Tab")
    expect(question.get_by_role("button", name="Fork to new chat")).to_be_focused()

    # A code block copies its own text only.
    code_copy = reply.get_by_role("button", name="Copy code")
    code_copy.click()
    expect(reply.get_by_role("button", name="Copied", exact=True)).to_be_visible()
    assert clipboard(chat_page) == "print('hi')\nprint('there')"
    expect(reply.get_by_role("button", name="Copy code")).to_be_visible()
    # The buttons are not part of the reply's text.
    assert "Copy" not in reply.locator(".content").inner_text()
    assert not chat_page.errors  # type: ignore[attr-defined]


def test_fork_a_message_into_a_new_chat_that_opens_in_place(chat_page: Page, stack: Stack, owner):
    source = chat_with(
        owner,
        "Travel plans",
        services.NewMessage(role="user", content="Where should I go?"),
        services.NewMessage(role="assistant", content="Lisbon."),
        services.NewMessage(role="user", content="And after that?"),
        services.NewMessage(role="assistant", content="Porto."),
    )
    chat_page.goto(f"/chat/{source.pk}/")
    expect(chat_page.locator("article.message")).to_have_count(4)
    chat_page.evaluate("window.__samePage = true")
    forks: list[Request] = []
    chat_page.on("request", lambda r: forks.append(r) if r.url.endswith("/fork/") else None)

    first_reply = chat_page.locator("article.message.assistant").first
    first_reply.hover()
    first_reply.get_by_role("button", name="Fork to new chat").click()

    expect(chat_page).not_to_have_url(f"{stack.url}/chat/{source.pk}/")
    fork = Conversation.objects.exclude(pk=source.pk).get(owner=owner)
    assert fork.forked_from_id == source.pk
    expect(chat_page).to_have_url(f"{stack.url}/chat/{fork.pk}/")
    expect(chat_page.locator("article.message .content")).to_have_text(
        ["Where should I go?", "Lisbon."]
    )
    expect(chat_page.locator("#chat-title")).to_have_text("Travel plans")
    current = chat_page.locator(".conversation-link[aria-current=page]")
    expect(current).to_have_attribute("href", f"/chat/{fork.pk}/")
    expect(chat_page.locator(".conversation-item", has_text="Travel plans")).to_have_count(2)
    expect(chat_page.locator("#connection")).to_have_text("Live")
    assert chat_page.evaluate("window.__samePage") is True

    # The fork point is the message's seq, on its branch when messages name one.
    body = json.loads(forks[0].post_data or "{}")
    client = Client()
    client.force_login(owner)
    stored = client.get(f"/api/v1/conversations/{source.pk}/messages/").json()["results"][1]
    assert body["at_seq"] == stored["seq"] == 2
    if "branch_id" in stored:
        assert body["branch_id"] == stored["branch_id"]
    else:
        assert "branch_id" not in body

    # Back returns to the source, unchanged.
    chat_page.go_back()
    expect(chat_page).to_have_url(f"{stack.url}/chat/{source.pk}/")
    expect(chat_page.locator("article.message")).to_have_count(4)
    assert not chat_page.errors  # type: ignore[attr-defined]


def test_a_fork_that_would_split_a_tool_call_from_its_results_says_why(
    chat_page: Page, stack: Stack, owner
):
    calls = [
        {"id": "call_1", "name": "calculator", "arguments": '{"expression": "1+1"}'},
        {"id": "call_2", "name": "current_time", "arguments": "{}"},
    ]
    # A reply whose second tool is still running: forking after the first result would
    # cut the assistant's calls from a result.
    source = chat_with(
        owner,
        "Busy",
        services.NewMessage(role="user", content="Sum and time, please."),
        services.NewMessage(role="assistant", tool_calls=calls),
        services.NewMessage(role="tool", content="2", tool_call_id="call_1", name="calculator"),
    )
    chat_page.goto(f"/chat/{source.pk}/")
    turn = chat_page.locator("article.message.assistant")
    expect(turn.locator(".tool-card")).to_have_count(2)
    turn.hover()
    turn.get_by_role("button", name="Fork to new chat").click()

    problem = turn.get_by_role("alert")
    expect(problem).to_contain_text("Cannot fork here:")
    expect(problem).to_contain_text("inside a tool call group")
    expect(chat_page).to_have_url(f"{stack.url}/chat/{source.pk}/")
    assert Conversation.objects.filter(owner=owner).count() == 1
    assert not chat_page.errors  # type: ignore[attr-defined]
