"""The sidebar (rename, archive, search, export, delete) and the account pages, in a
real browser. Screenshots for the README are taken here too."""

import json
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from django.db import connection
from playwright.sync_api import Page, expect

from accounts.models import User
from conversations import services
from conversations.models import Conversation
from tests.support.browser import Stack, log_in, wait_idle
from tests.support.fake_openai import Script

pytestmark = pytest.mark.django_db(transaction=True)

SCREENSHOTS = Path(__file__).resolve().parents[2] / "docs" / "screenshots"


def item(page: Page, title: str):
    return page.locator(".conversation-item", has_text=title)


def menu_action(page: Page, title: str, action: str) -> None:
    page.get_by_label(f"Actions for {title}").click()
    item(page, title).get_by_role("button", name=action).click()


def test_rename_search_archive_export_and_delete_from_the_sidebar(
    page: Page, context, stack: Stack, owner
):
    trip = services.conversation_create(owner=owner, title="Trip to Lisbon")
    services.user_message_append(conversation=trip, content="Where do pastel de nata come from?")
    services.conversation_create(owner=owner, title="Groceries")
    log_in(context, stack, owner)
    page.goto("/chat/")
    expect(page.locator(".conversation-item")).to_have_count(2)

    # Rename (a dialog with the current title filled in).
    menu_action(page, "Groceries", "Rename")
    page.get_by_label("Title").fill("Weekly groceries")
    page.get_by_role("button", name="Rename").click()
    expect(item(page, "Weekly groceries")).to_be_visible()
    assert Conversation.objects.filter(owner=owner, title="Weekly groceries").exists()

    # Search finds message text, not only titles.
    page.get_by_label("Search conversations").fill("nata")
    expect(page.locator(".conversation-item")).to_have_count(1)
    expect(item(page, "Trip to Lisbon").locator(".snippet mark")).to_have_text("nata")
    page.get_by_label("Search conversations").fill("")
    expect(page.locator(".conversation-item")).to_have_count(2)

    # Export downloads the file.
    page.get_by_label("Actions for Trip to Lisbon").click()
    with page.expect_download() as download_info:
        item(page, "Trip to Lisbon").get_by_role("link", name="Export JSON").click()
    exported = json.loads(Path(download_info.value.path()).read_text())
    assert exported["conversation"]["title"] == "Trip to Lisbon"
    assert exported["messages"][0]["content"] == "Where do pastel de nata come from?"
    page.keyboard.press("Escape")

    # Archive moves it to the archived view, and back.
    menu_action(page, "Trip to Lisbon", "Archive")
    expect(item(page, "Trip to Lisbon")).to_have_count(0)
    trip.refresh_from_db()
    assert trip.archived_at is not None
    page.get_by_role("button", name="Archived").click()
    expect(item(page, "Trip to Lisbon")).to_be_visible()
    menu_action(page, "Trip to Lisbon", "Unarchive")
    expect(item(page, "Trip to Lisbon")).to_have_count(0)
    page.get_by_role("button", name="Chats").click()
    expect(item(page, "Trip to Lisbon")).to_be_visible()

    # Delete asks first; cancelling keeps it.
    menu_action(page, "Weekly groceries", "Delete")
    page.get_by_role("button", name="Cancel").click()
    assert Conversation.objects.filter(title="Weekly groceries").exists()
    menu_action(page, "Weekly groceries", "Delete")
    expect(page.get_by_role("dialog")).to_contain_text("cannot be undone")
    page.get_by_role("dialog").get_by_role("button", name="Delete").click()
    expect(item(page, "Weekly groceries")).to_have_count(0)
    assert not Conversation.objects.filter(title="Weekly groceries").exists()


def test_the_sidebar_loads_more_conversations_as_it_scrolls(
    page: Page, context, stack: Stack, owner
):
    for number in range(45):
        services.conversation_create(owner=owner, title=f"Chat {number:02d}")
    log_in(context, stack, owner)
    page.goto("/chat/")
    expect(page.locator(".conversation-item")).to_have_count(30)
    page.locator(".conversation-item").last.scroll_into_view_if_needed()
    expect(page.locator(".conversation-item")).to_have_count(45)


def test_sign_up_log_out_and_log_in(page: Page, stack: Stack, db):
    page.goto("/")
    expect(page).to_have_url(f"{stack.url}/accounts/login/")
    page.get_by_role("link", name="Create an account").click()
    page.get_by_label("Username").fill("newcomer")
    page.get_by_label("Password", exact=True).fill("a-long-passphrase-42")
    page.get_by_label("Password confirmation").fill("a-long-passphrase-42")
    page.get_by_role("button", name="Sign up").click()
    expect(page).to_have_url(f"{stack.url}/chat/")
    expect(page.locator(".account")).to_contain_text("Signed in as newcomer")
    assert User.objects.filter(username="newcomer").exists()

    page.get_by_role("button", name="Log out").click()
    expect(page).to_have_url(f"{stack.url}/accounts/login/")
    page.get_by_label("Username").fill("newcomer")
    page.get_by_label("Password").fill("wrong")
    page.get_by_role("button", name="Log in").click()
    expect(page.locator(".errors")).to_contain_text("enter a correct username and password")
    page.get_by_label("Password").fill("a-long-passphrase-42")
    page.get_by_role("button", name="Log in").click()
    expect(page).to_have_url(f"{stack.url}/chat/")


def test_screenshots_of_the_chat_and_the_sidebar(
    page: Page, context, stack: Stack, owner, tmp_path
):
    """The README's pictures. Written to docs/screenshots/ only with
    PARLEY_UPDATE_SCREENSHOTS=1, so ordinary runs leave the repository untouched."""
    target = SCREENSHOTS if os.environ.get("PARLEY_UPDATE_SCREENSHOTS") == "1" else tmp_path
    target.mkdir(parents=True, exist_ok=True)
    for title in ["Trip to Lisbon", "Quarterly report", "Birthday ideas for Ana"]:
        services.conversation_create(owner=owner, title=title)
    stack.fake.push(
        Script(tool_calls=[("call_1", "calculator", '{"expression": "1250 * 0.18"}')]),
        Script(
            text="The tip comes to **225**.\n\n| item | amount |\n|---|---|\n"
            "| bill | 1250 |\n| tip (18%) | 225 |\n\nI also put a note in the draft."
        ),
    )
    log_in(context, stack, owner)
    page.set_viewport_size({"width": 1280, "height": 760})
    page.goto("/chat/")
    page.get_by_label("Draft text").fill("Dinner on Friday: 1250 for six people, tip 18%.")
    page.get_by_role("button", name="Save draft").click()
    expect(page.locator("#draft-status")).to_contain_text("Saved")
    box = page.get_by_label("Message", exact=True)
    box.fill("What is an 18% tip on 1250?")
    box.press("Enter")
    wait_idle(page)
    expect(page.locator(".tool-card")).to_have_attribute("data-state", "done")
    page.screenshot(path=str(target / "chat.png"))
    page.locator("#sidebar").screenshot(path=str(target / "sidebar.png"))
    page.set_viewport_size({"width": 390, "height": 760})
    page.reload()
    expect(page.locator(".tool-card")).to_have_attribute("data-state", "done")
    page.screenshot(path=str(target / "phone.png"))
    assert (target / "chat.png").stat().st_size > 10_000


def test_conversations_deleted_elsewhere_leave_every_open_tab(page: Page, context, stack, owner):
    """A moderator's bulk delete reaches the owner's tabs as one notification: the tab on a
    deleted conversation says so, another tab drops the deleted ones from its list."""
    kept = services.conversation_create(owner=owner, title="Kept")
    gone = [services.conversation_create(owner=owner, title=f"Old {n}") for n in range(3)]
    log_in(context, stack, owner)
    page.goto(f"/chat/{kept.pk}/")
    expect(page.locator("#connection")).to_have_text("Live")
    on_gone = context.new_page()
    on_gone.goto(f"/chat/{gone[0].pk}/")
    expect(on_gone.locator("#connection")).to_have_text("Live")
    expect(page.locator(".conversation-item")).to_have_count(4)

    def delete() -> None:
        try:
            services.conversations_delete(
                actor=None, queryset=Conversation.objects.filter(pk__in=[c.pk for c in gone])
            )
        finally:
            connection.close()

    # On a thread of its own, as in a server or a command: this one runs the browser's
    # event loop, from which notifications are not sent.
    with ThreadPoolExecutor(1) as pool:
        pool.submit(delete).result()

    expect(page.locator(".conversation-item")).to_have_count(1)
    expect(item(page, "Kept")).to_be_visible()
    expect(on_gone.locator("#composer-input")).to_be_disabled()
    expect(on_gone.locator(".conversation-item")).to_have_count(1)
