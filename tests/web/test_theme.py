"""The theme switch in a real browser: Dark turns the shared page and the chat dark, kept
across reloads and pages; Light holds against a dark system setting."""

import pytest
from playwright.sync_api import BrowserContext, Page, expect

from conversations import services
from tests.support.browser import Stack, log_in

pytestmark = pytest.mark.django_db(transaction=True)

LIGHT_BG = "rgb(247, 247, 248)"
DARK_BG = "rgb(22, 23, 27)"


def background(page: Page) -> str:
    return page.evaluate("getComputedStyle(document.body).backgroundColor")


def test_the_switch_turns_every_page_dark_and_the_choice_stays(
    page: Page, context: BrowserContext, stack: Stack, owner
):
    conversation = services.conversation_create(owner=owner, title="Cats")
    services.user_message_append(conversation=conversation, content="Why do cats purr?")
    _, token = services.share_create(conversation=conversation, user=owner)
    log_in(context, stack, owner)
    page.emulate_media(color_scheme="light")

    page.goto(f"/s/{token}/")
    assert background(page) == LIGHT_BG
    page.get_by_label("Theme").select_option("dark")
    expect(page.locator("html")).to_have_attribute("data-theme", "dark")
    assert background(page) == DARK_BG

    page.reload()
    expect(page.get_by_label("Theme")).to_have_value("dark")
    assert background(page) == DARK_BG

    page.goto("/chat/")
    expect(page.locator("html")).to_have_attribute("data-theme", "dark")
    expect(page.get_by_label("Theme")).to_have_value("dark")
    panel = page.evaluate("getComputedStyle(document.getElementById('sidebar')).backgroundColor")
    assert panel == "rgb(30, 31, 36)"

    # Light holds against a dark system; System follows it again.
    page.emulate_media(color_scheme="dark")
    page.get_by_label("Theme").select_option("light")
    assert background(page) == LIGHT_BG
    page.get_by_label("Theme").select_option("system")
    expect(page.locator("html")).not_to_have_attribute("data-theme", "dark")
    assert background(page) == DARK_BG
    page.reload()
    expect(page.get_by_label("Theme")).to_have_value("system")
    assert page.evaluate("localStorage.getItem('parley.theme')") is None
