"""Moving between conversations without reloading the page: the sidebar, New chat, the
browser's back and forward buttons, and a reply in the conversation opened last."""

import pytest
from playwright.sync_api import Page, expect

from conversations import services
from conversations.models import Message, Run
from tests.support.browser import Stack, wait_idle
from tests.support.fake_openai import Script

pytestmark = pytest.mark.django_db(transaction=True)


def chat_with(owner, title: str, *texts: str):
    conversation = services.conversation_create(owner=owner, title=title)
    services.messages_append(
        conversation=conversation,
        messages=[
            services.NewMessage(role="user" if n % 2 == 0 else "assistant", content=text)
            for n, text in enumerate(texts)
        ],
    )
    return conversation


def open_from_sidebar(page: Page, title: str) -> None:
    page.locator(".conversation-item", has_text=title).get_by_role("link").click()


def expect_open(page: Page, stack: Stack, conversation, title: str, first_text: str) -> None:
    expect(page).to_have_url(f"{stack.url}/chat/{conversation.pk}/")
    expect(page.locator("#chat-title")).to_have_text(title)
    expect(page).to_have_title(f"{title} · Parley")
    expect(page.locator("article.message .content").first).to_have_text(first_text)
    current = page.locator(".conversation-link[aria-current=page]")
    expect(current).to_have_count(1)
    expect(current).to_have_text(title)


def test_switching_conversations_happens_in_place_and_back_and_forward_work(
    chat_page: Page, stack: Stack, owner
):
    paris = chat_with(owner, "Paris", "What is in Paris?", "The Louvre.")
    rome = chat_with(owner, "Rome", "What is in Rome?", "The Colosseum.")
    paris.refresh_from_db()
    services.conversation_draft_update(conversation=paris, draft="Paris notes")
    chat_page.goto(f"/chat/{paris.pk}/")  # a direct load of a conversation's address
    expect_open(chat_page, stack, paris, "Paris", "What is in Paris?")
    expect(chat_page.get_by_label("Draft text")).to_have_value("Paris notes")
    expect(chat_page.locator("#connection")).to_have_text("Live")
    # Survives only as long as the page does: a full navigation would lose it.
    chat_page.evaluate("window.__samePage = true")
    sockets = []
    chat_page.on("websocket", lambda ws: sockets.append(ws.url))

    open_from_sidebar(chat_page, "Rome")
    expect_open(chat_page, stack, rome, "Rome", "What is in Rome?")
    expect(chat_page.locator("article.message .content")).to_have_text(
        ["What is in Rome?", "The Colosseum."]
    )
    expect(chat_page.get_by_label("Draft text")).to_have_value("")
    expect(chat_page.locator("#connection")).to_have_text("Live")
    assert chat_page.evaluate("window.__samePage") is True
    assert sockets
    assert f"/ws/conversations/{rome.pk}/" in sockets[-1]

    chat_page.go_back()
    expect_open(chat_page, stack, paris, "Paris", "What is in Paris?")
    expect(chat_page.get_by_label("Draft text")).to_have_value("Paris notes")
    chat_page.go_forward()
    expect_open(chat_page, stack, rome, "Rome", "What is in Rome?")
    assert chat_page.evaluate("window.__samePage") is True

    # The settings dialog is the open conversation's.
    chat_page.get_by_role("button", name="Settings").click()
    dialog = chat_page.get_by_role("dialog")
    dialog.get_by_label("System prompt").fill("Answer like a Roman.")
    dialog.get_by_role("button", name="Save").click()
    expect(dialog).to_be_hidden()
    rome.refresh_from_db()
    paris.refresh_from_db()
    assert (rome.system_prompt, paris.system_prompt) == ("Answer like a Roman.", "")

    # A reply in the conversation opened last streams into the page.
    expect(chat_page.locator("#connection")).to_have_text("Live")
    stack.fake.push(Script(text="Try the carbonara.", tokens_per_second=40))
    box = chat_page.get_by_label("Message", exact=True)
    box.fill("Where should I eat?")
    box.press("Enter")
    expect(chat_page.locator("article.message.assistant .content").last).to_have_text(
        "Try the carbonara."
    )
    wait_idle(chat_page)
    run = Run.objects.get(conversation=rome)
    assert run.status == "completed"
    assert not Run.objects.filter(conversation=paris).exists()
    assert chat_page.evaluate("window.__samePage") is True
    assert not chat_page.errors  # type: ignore[attr-defined]


def test_new_chat_opens_in_place_and_its_first_message_makes_a_conversation(
    chat_page: Page, stack: Stack, owner
):
    paris = chat_with(owner, "Paris", "What is in Paris?", "The Louvre.")
    chat_page.goto(f"/chat/{paris.pk}/")
    expect_open(chat_page, stack, paris, "Paris", "What is in Paris?")
    chat_page.evaluate("window.__samePage = true")

    chat_page.get_by_role("link", name="New chat").click()
    expect(chat_page).to_have_url(f"{stack.url}/chat/")
    expect(chat_page.locator("#chat-title")).to_have_text("New chat")
    expect(chat_page).to_have_title("Parley")
    expect(chat_page.locator("article.message")).to_have_count(0)
    expect(chat_page.locator("#empty")).to_be_visible()
    expect(chat_page.locator(".conversation-link[aria-current=page]")).to_have_count(0)

    stack.fake.push(Script(text="Hello there."))
    box = chat_page.get_by_label("Message", exact=True)
    box.fill("Hi, new chat")
    box.press("Enter")
    wait_idle(chat_page)
    expect(chat_page.locator("article.message.assistant .content")).to_have_text(["Hello there."])
    fresh = Message.objects.get(content="Hi, new chat").conversation
    expect(chat_page).to_have_url(f"{stack.url}/chat/{fresh.pk}/")
    expect(chat_page.locator(".conversation-link[aria-current=page]")).to_have_text("Hi, new chat")

    # Back goes to the conversation open before New chat (the new chat took /chat/'s place).
    chat_page.go_back()
    expect_open(chat_page, stack, paris, "Paris", "What is in Paris?")
    assert chat_page.evaluate("window.__samePage") is True
    assert not chat_page.errors  # type: ignore[attr-defined]
