"""Pins, tags and folders in the sidebar, in a real browser: each by mouse and by
keyboard, and every open tab following the changes made in another."""

import pytest
from playwright.sync_api import Locator, Page, expect

from conversations import services
from conversations.models import Conversation, Folder
from tests.support.browser import Stack, log_in

pytestmark = pytest.mark.django_db(transaction=True)


def item(page: Page, title: str) -> Locator:
    return page.locator(".conversation-item", has_text=title)


def titles(page: Page) -> Locator:
    return page.locator(".conversation-item .title")


def folder(page: Page, name: str) -> Locator:
    return page.locator(".folder-item", has_text=name)


def menu_action(page: Page, title: str, action: str) -> None:
    page.get_by_label(f"Actions for {title}").click()
    item(page, title).get_by_role("button", name=action).click()


def tab_to(page: Page, name: str) -> None:
    """Press Tab until the control named `name` has the focus, as a keyboard user would."""
    for _ in range(20):
        page.keyboard.press("Tab")
        if page.evaluate("() => document.activeElement.textContent.trim()") == name:
            return
    raise AssertionError(f"Tab never reached {name!r}")


def chat_with(page: Page, context, stack: Stack, owner, names: list[str]) -> None:
    """Conversations of these titles, the oldest first, and the chat page listing them."""
    for title in names:
        services.conversation_create(owner=owner, title=title)
    log_in(context, stack, owner)
    page.goto("/chat/")
    expect(page.locator(".conversation-item")).to_have_count(len(names))


def test_a_pinned_conversation_leads_the_list_and_stays_there(page: Page, context, stack, owner):
    chat_with(page, context, stack, owner, ["Oldest", "Middle", "Newest"])
    expect(titles(page)).to_have_text(["Newest", "Middle", "Oldest"])
    expect(page.locator(".list-heading")).to_have_count(0)

    menu_action(page, "Oldest", "Pin")
    expect(titles(page)).to_have_text(["Oldest", "Newest", "Middle"])
    expect(page.locator(".list-heading")).to_have_text(["Pinned", "Recent"])
    assert Conversation.objects.get(title="Oldest").pinned

    page.reload()
    expect(titles(page)).to_have_text(["Oldest", "Newest", "Middle"])
    page.get_by_label("Actions for Oldest").click()
    expect(item(page, "Oldest").get_by_role("button", name="Unpin")).to_be_visible()

    item(page, "Oldest").get_by_role("button", name="Unpin").click()
    expect(titles(page)).to_have_text(["Newest", "Middle", "Oldest"])
    expect(page.locator(".list-heading")).to_have_count(0)
    assert not page.errors  # type: ignore[attr-defined]


def test_tags_from_the_dialog_show_as_chips_that_filter_the_list(
    page: Page, context, stack: Stack, owner
):
    chat_with(page, context, stack, owner, ["Trip to Lisbon", "Groceries"])

    menu_action(page, "Trip to Lisbon", "Tags…")
    dialog = page.get_by_role("dialog")
    box = dialog.get_by_label("Add a tag")
    for name in ["travel", "Portugal", "oops"]:
        box.fill(name)
        box.press("Enter")
    dialog.get_by_role("button", name="Remove tag oops").click()
    expect(dialog.locator("#tags-chosen .tag-chip")).to_have_count(2)
    dialog.get_by_role("button", name="Save").click()
    expect(dialog).to_be_hidden()
    chips = item(page, "Trip to Lisbon").locator(".item-meta .tag-chip")
    expect(chips).to_have_text(["Portugal", "travel"])
    trip = Conversation.objects.get(title="Trip to Lisbon")
    assert sorted(trip.tags.values_list("name", flat=True)) == ["Portugal", "travel"]

    # The user's tags are suggested for the next conversation; the same name in another
    # case is the same tag.
    menu_action(page, "Groceries", "Tags…")
    expect(page.locator("#tags-suggestions option[value=travel]")).to_have_count(1)
    box.fill("TRAVEL")
    box.press("Enter")
    box.press("Enter")  # in the empty box: saves
    expect(dialog).to_be_hidden()
    expect(item(page, "Groceries").locator(".tag-chip")).to_have_text(["travel"])

    # A chip narrows the list to its tag, until the filter is cleared.
    menu_action(page, "Groceries", "Tags…")
    dialog.get_by_role("button", name="Remove tag travel").click()
    dialog.get_by_role("button", name="Save").click()
    expect(item(page, "Groceries").locator(".tag-chip")).to_have_count(0)
    item(page, "Trip to Lisbon").get_by_role("button", name="travel").click()
    expect(page.locator(".conversation-item")).to_have_count(1)
    expect(page.locator(".filter-chip")).to_contain_text("Tag: travel")
    page.get_by_role("button", name="Clear the tag filter").click()
    expect(page.locator(".conversation-item")).to_have_count(2)

    # The Tags section lists them with their counts; `tag:` in the search works too.
    expect(page.locator("#tag-list .tag-chip")).to_have_text(["Portugal1", "travel1"])
    page.get_by_label("Search conversations").fill("tag:portugal")
    expect(page.locator(".conversation-item")).to_have_count(1)
    expect(item(page, "Trip to Lisbon")).to_be_visible()
    page.get_by_label("Search conversations").fill("")
    expect(page.locator(".conversation-item")).to_have_count(2)
    assert not page.errors  # type: ignore[attr-defined]


def test_a_conversation_dragged_onto_a_folder_is_filed_and_leaves_it_by_keyboard(
    page: Page, context, stack: Stack, owner
):
    chat_with(page, context, stack, owner, ["Trip to Lisbon", "Groceries"])

    page.get_by_role("button", name="New folder").click()
    page.get_by_label("Folder name").fill("Holidays")
    page.get_by_label("Folder name").press("Enter")
    expect(folder(page, "Holidays")).to_be_visible()

    item(page, "Trip to Lisbon").drag_to(folder(page, "Holidays"))
    expect(folder(page, "Holidays").locator(".folder-count")).to_have_text("1")
    expect(item(page, "Trip to Lisbon").locator(".folder-label")).to_have_text("Holidays")
    holidays = Folder.objects.get(owner=owner, name="Holidays")
    assert Conversation.objects.get(title="Trip to Lisbon").folder_id == holidays.pk

    # The main list still shows every conversation; the folder shows its own.
    expect(page.locator(".conversation-item")).to_have_count(2)
    folder(page, "Holidays").get_by_role("button", name="Holidays").click()
    expect(page.locator(".conversation-item")).to_have_count(1)
    expect(item(page, "Trip to Lisbon")).to_be_visible()
    expect(page.locator(".filter-chip")).to_contain_text("Folder: Holidays")

    # Out of the folder with the keyboard alone: the menu, then "Move to folder…".
    page.get_by_label("Actions for Trip to Lisbon").focus()
    page.keyboard.press("Enter")
    tab_to(page, "Move to folder…")
    page.keyboard.press("Enter")
    expect(page.get_by_role("dialog")).to_contain_text("Where should “Trip to Lisbon” go?")
    tab_to(page, "No folder")
    page.keyboard.press("Enter")
    expect(page.locator(".conversation-item")).to_have_count(0)
    expect(page.locator("#list-status")).to_contain_text("This folder is empty")
    assert Conversation.objects.get(title="Trip to Lisbon").folder_id is None

    page.get_by_role("button", name="Clear the folder filter").click()
    expect(page.locator(".conversation-item")).to_have_count(2)
    expect(item(page, "Trip to Lisbon").locator(".folder-label")).to_have_count(0)
    expect(folder(page, "Holidays").locator(".folder-count")).to_have_text("0")
    assert not page.errors  # type: ignore[attr-defined]


def test_another_tab_follows_pins_tags_and_folders(page: Page, context, stack: Stack, owner):
    groceries = services.conversation_create(owner=owner, title="Groceries")
    services.conversation_create(owner=owner, title="Trip to Lisbon")
    log_in(context, stack, owner)
    page.goto("/chat/")
    other = context.new_page()
    other.goto(f"/chat/{groceries.pk}/")
    expect(other.locator("#connection")).to_have_text("Live")
    # A tab with no conversation open has no socket: it catches up when shown again.
    idle = context.new_page()
    idle.goto("/chat/")
    expect(titles(other)).to_have_text(["Trip to Lisbon", "Groceries"])
    expect(titles(idle)).to_have_text(["Trip to Lisbon", "Groceries"])

    menu_action(page, "Groceries", "Pin")
    expect(titles(other)).to_have_text(["Groceries", "Trip to Lisbon"])

    menu_action(page, "Trip to Lisbon", "Tags…")
    page.get_by_label("Add a tag").fill("travel")
    page.get_by_label("Add a tag").press("Enter")
    page.get_by_role("dialog").get_by_role("button", name="Save").click()
    expect(item(other, "Trip to Lisbon").locator(".tag-chip")).to_have_text(["travel"])
    expect(other.locator("#tag-list .tag-chip")).to_have_text(["travel1"])

    # A new folder made from "Move to folder…" takes the conversation at once.
    menu_action(page, "Groceries", "Move to folder…")
    page.get_by_role("dialog").get_by_role("button", name="New folder…").click()
    page.get_by_label("Folder name").fill("Errands")
    page.get_by_role("button", name="Create").click()
    expect(folder(other, "Errands")).to_be_visible()
    expect(item(other, "Groceries").locator(".folder-label")).to_have_text("Errands")
    expect(folder(other, "Errands").locator(".folder-count")).to_have_text("1")

    expect(titles(idle)).to_have_text(["Trip to Lisbon", "Groceries"])
    idle.evaluate("() => document.dispatchEvent(new Event('visibilitychange'))")
    expect(titles(idle)).to_have_text(["Groceries", "Trip to Lisbon"])
    expect(item(idle, "Groceries").locator(".folder-label")).to_have_text("Errands")
    assert not page.errors  # type: ignore[attr-defined]


def test_folders_reorder_fold_away_and_delete_without_losing_conversations(
    page: Page, context, stack: Stack, owner
):
    projects = services.folder_create(owner=owner, name="Old projects")
    services.folder_create(owner=owner, name="Recipes")
    report = services.conversation_create(owner=owner, title="Report")
    services.conversation_organise(conversation=report, folder_id=projects.pk)
    services.conversation_create(owner=owner, title="Other")
    log_in(context, stack, owner)
    page.goto("/chat/")
    names = page.locator(".folder-item .folder-name")
    expect(names).to_have_text(["Old projects", "Recipes"])

    # Move up from the folder's menu; the keyboard stays on the folder moved.
    page.get_by_label("Actions for folder Recipes").click()
    folder(page, "Recipes").get_by_role("button", name="Move up").click()
    expect(names).to_have_text(["Recipes", "Old projects"])
    expect(page.get_by_label("Actions for folder Recipes")).to_be_focused()
    # A folder dragged onto another takes its place.
    folder(page, "Old projects").drag_to(folder(page, "Recipes"))
    expect(names).to_have_text(["Old projects", "Recipes"])

    # The section folds away, and stays folded after a reload.
    page.get_by_role("button", name="Folders").click()
    expect(names.first).to_be_hidden()
    page.reload()
    expect(page.locator(".conversation-item")).to_have_count(2)
    expect(page.get_by_role("button", name="Folders")).to_have_attribute("aria-expanded", "false")
    page.get_by_role("button", name="Folders").click()
    expect(names).to_have_text(["Old projects", "Recipes"])

    # A name taken (whatever its case) is said in the dialog, which asks again.
    page.get_by_label("Actions for folder Recipes").click()
    folder(page, "Recipes").get_by_role("button", name="Rename…").click()
    page.get_by_label("Folder name").fill("old PROJECTS")
    page.get_by_label("Folder name").press("Enter")
    expect(page.get_by_role("dialog")).to_contain_text("is the name of another of your folders")
    page.get_by_label("Folder name").fill("Cooking")
    page.get_by_label("Folder name").press("Enter")
    expect(names).to_have_text(["Old projects", "Cooking"])

    # Deleting the folder open in the list: its conversation stays, in no folder.
    folder(page, "Old projects").get_by_role("button", name="Old projects").click()
    expect(page.locator(".conversation-item")).to_have_count(1)
    page.get_by_label("Actions for folder Old projects").click()
    folder(page, "Old projects").get_by_role("button", name="Delete…").click()
    expect(page.get_by_role("dialog")).to_contain_text("Its conversation stays, in no folder.")
    page.get_by_role("dialog").get_by_role("button", name="Delete").click()
    expect(names).to_have_text(["Cooking"])
    expect(page.locator(".filter-chip")).to_have_count(0)
    expect(page.locator(".conversation-item")).to_have_count(2)
    expect(item(page, "Report").locator(".folder-label")).to_have_count(0)
    report.refresh_from_db()
    assert report.folder_id is None
    assert not page.errors  # type: ignore[attr-defined]
