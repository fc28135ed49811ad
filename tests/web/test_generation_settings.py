"""Generation settings in a real browser: the settings dialog's temperature and max output
tokens, and a reply cut short at its limit saying so."""

import pytest
from playwright.sync_api import Page, expect

from conversations import services
from conversations.models import Conversation, Message, Run
from tests.support.browser import Stack, wait_idle
from tests.support.fake_openai import Script

pytestmark = pytest.mark.django_db(transaction=True)

STORY = "".join(f"word{i} " for i in range(60)).strip()


def open_settings(page: Page, conversation: Conversation):
    page.goto(f"/chat/{conversation.pk}/")
    expect(page.locator("#connection")).to_have_text("Live")
    page.get_by_role("button", name="Settings").click()
    return page.get_by_role("dialog")


def test_temperature_and_max_output_tokens_round_trip_through_the_dialog(chat_page: Page, owner):
    conversation = services.conversation_create(owner=owner, title="Tuned")
    dialog = open_settings(chat_page, conversation)
    temperature = dialog.get_by_label("Temperature")
    limit = dialog.get_by_label("Max output tokens")
    # Empty means the server's default, and the field says which.
    expect(temperature).to_have_value("")
    expect(temperature).to_have_attribute("placeholder", "Default: the model's own")
    expect(limit).to_have_value("")
    expect(limit).to_have_attribute("placeholder", "Default: 4096")

    temperature.fill("0.4")
    limit.fill("200")
    dialog.get_by_role("button", name="Save").click()
    expect(dialog).to_be_hidden()
    conversation.refresh_from_db()
    assert (conversation.temperature, conversation.max_output_tokens) == (0.4, 200)

    # Opened again (after a reload too), the dialog shows what was saved.
    dialog = open_settings(chat_page, conversation)
    expect(dialog.get_by_label("Temperature")).to_have_value("0.4")
    expect(dialog.get_by_label("Max output tokens")).to_have_value("200")
    # Emptied, both go back to the server's defaults.
    dialog.get_by_label("Temperature").fill("")
    dialog.get_by_label("Max output tokens").fill("")
    dialog.get_by_role("button", name="Save").click()
    expect(dialog).to_be_hidden()
    conversation.refresh_from_db()
    assert (conversation.temperature, conversation.max_output_tokens) == (None, None)


def test_a_value_out_of_range_shows_the_servers_answer_and_saves_nothing(chat_page: Page, owner):
    conversation = services.conversation_create(owner=owner, title="Tuned", temperature=1.0)
    dialog = open_settings(chat_page, conversation)
    temperature = dialog.get_by_label("Temperature")
    limit = dialog.get_by_label("Max output tokens")

    temperature.fill("3")
    dialog.get_by_role("button", name="Save").click()
    alert = dialog.get_by_role("alert")
    expect(alert).to_have_text("Temperature: must be between 0 and 2.")
    expect(dialog).to_be_visible()
    expect(temperature).to_have_attribute("aria-invalid", "true")
    expect(temperature).to_be_focused()

    temperature.fill("0.5")
    limit.fill("999999")
    dialog.get_by_role("button", name="Save").click()
    expect(alert).to_have_text("Max output tokens: must be between 1 and 32768.")
    expect(temperature).not_to_have_attribute("aria-invalid", "true")
    conversation.refresh_from_db()
    assert (conversation.temperature, conversation.max_output_tokens) == (1.0, None)

    limit.fill("1000")
    dialog.get_by_role("button", name="Save").click()
    expect(dialog).to_be_hidden()
    conversation.refresh_from_db()
    assert (conversation.temperature, conversation.max_output_tokens) == (0.5, 1000)


def test_a_reply_cut_at_its_token_limit_says_so(chat_page: Page, stack: Stack, owner):
    conversation = services.conversation_create(owner=owner, title="Short", max_output_tokens=5)
    stack.fake.push(Script(text=STORY, tokens_per_second=100))
    chat_page.goto(f"/chat/{conversation.pk}/")
    box = chat_page.get_by_label("Message", exact=True)
    box.fill("Tell me a long story")
    box.press("Enter")

    note = chat_page.locator(".note.incomplete")
    expect(note).to_contain_text("The reply reached its limit of 5 tokens")
    wait_idle(chat_page)
    run = Run.objects.get(conversation=conversation)
    assert run.status == Run.Status.INCOMPLETE
    assert stack.fake.requests[0].body["max_completion_tokens"] == 5
    reply = Message.objects.get(run=run, role="assistant")
    assert 0 < len(reply.content) < len(STORY)
    article = chat_page.locator("article.message.assistant").last
    expect(article.locator(".content")).to_have_text(reply.content.rstrip())
    expect(article.locator(".reply-note")).to_have_text(
        "Cut short: this reply reached its output token limit."
    )

    # The reply itself still says so after a reload.
    chat_page.reload()
    article = chat_page.locator("article.message.assistant").last
    expect(article.locator(".reply-note")).to_be_visible()


def test_whether_the_model_takes_images_is_set_in_the_dialog(chat_page: Page, owner):
    conversation = services.conversation_create(owner=owner, title="Pictures")
    dialog = open_settings(chat_page, conversation)
    takes_images = dialog.get_by_label("Sees images")
    expect(takes_images).to_be_checked()

    takes_images.uncheck()
    dialog.get_by_role("button", name="Save").click()
    expect(dialog).to_be_hidden()
    conversation.refresh_from_db()
    assert conversation.vision is False

    dialog = open_settings(chat_page, conversation)
    expect(dialog.get_by_label("Sees images")).not_to_be_checked()
