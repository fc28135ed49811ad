"""Share links in a real browser: made from the conversation's menu and copied, read in a
private window (a fresh browser context) as the chat draws it, for signed-in users only,
continued in the reader's own account, revoked from the shared links page."""

import re
from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, BrowserContext, Page, expect

from accounts.models import User
from conversations import services
from conversations.models import Conversation, Share
from conversations.services import NewMessage
from tests.support.browser import TIMEOUT_MS, Stack, log_in, page_watched

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def sums(owner: User) -> Conversation:
    """A conversation with Markdown, a tool call with its result and a reply's thoughts."""
    conversation = services.conversation_create(
        owner=owner, title="Sums", system_prompt="Alice's private instructions"
    )
    services.messages_append(
        conversation=conversation,
        messages=[
            NewMessage(role="user", content="What is 12*7?"),
            NewMessage(
                role="assistant",
                content="Let me compute.",
                tool_calls=[
                    {"id": "call_1", "name": "calculator", "arguments": '{"expression": "12*7"}'}
                ],
            ),
            NewMessage(role="tool", tool_call_id="call_1", name="calculator", content="84"),
            NewMessage(
                role="assistant",
                content="It is **84**.\n\n```\n12*7 = 84\n```",
                reasoning="Twelve sevens.",
                reasoning_ms=1200,
            ),
        ],
    )
    return conversation


@pytest.fixture
def private(browser: Browser, stack: Stack, context: BrowserContext) -> Iterator[BrowserContext]:
    """A second window of its own (no cookies, storage or cache shared): a private window,
    or another person's browser. Closed before the test's data is flushed."""
    other = browser.new_context(base_url=stack.url)
    other.set_default_timeout(TIMEOUT_MS)
    yield other
    other.close()


def link_for(conversation: Conversation, audience: str = "public") -> str:
    _, token = services.share_create(
        conversation=conversation, user=conversation.owner, audience=audience
    )
    return f"/s/{token}/"


def expect_transcript(reader: Page) -> None:
    """The snapshot drawn as the chat draws it, read-only."""
    expect(reader.get_by_role("heading", name="Sums")).to_be_visible()
    question = reader.locator("article.message.user")
    expect(question.locator(".role")).to_have_text("User")  # not "You": the reader did not ask
    expect(question.locator(".content")).to_have_text("What is 12*7?")
    turn = reader.locator("article.message.assistant")
    expect(turn).to_have_count(1)  # the tool call and the answer read as one turn
    expect(turn.locator(".content strong")).to_have_text("84")  # Markdown
    expect(turn.locator(".code-block pre")).to_have_text("12*7 = 84")
    card = turn.locator('.tool-card[data-call-id="call_1"]')
    expect(card.locator(".tool-name")).to_have_text("calculator")
    expect(card.locator(".tool-result")).to_have_text("84")
    thoughts = turn.locator("details.reasoning")
    expect(thoughts.locator("summary")).to_have_text("Thought for 1 s")
    expect(thoughts).not_to_have_attribute("open", re.compile(".*"))
    # Nothing to change: copy only.
    for action in ("Edit", "Regenerate", "Fork to new chat"):
        expect(reader.get_by_role("button", name=action)).to_have_count(0)
    assert reader.errors == []  # type: ignore[attr-defined]
    text = reader.content()
    for private in ("alice", "Alice's private instructions"):
        assert private not in text


def test_the_owner_shares_from_the_menu_and_a_private_window_reads_it(
    page: Page, context: BrowserContext, private: BrowserContext, stack: Stack, owner, sums
):
    context.grant_permissions(["clipboard-read", "clipboard-write"], origin=stack.url)
    log_in(context, stack, owner)
    page.goto(f"/chat/{sums.pk}/")
    page.get_by_label("Actions for Sums").click()
    page.locator(".conversation-item", has_text="Sums").get_by_role("button", name="Share…").click()

    dialog = page.get_by_role("dialog", name="Share “Sums”")
    expect(dialog).to_be_visible()
    expect(dialog.locator("#share-list-status")).to_have_text("No links yet.")
    dialog.get_by_role("button", name="Create link").click()
    link = dialog.get_by_label("Link", exact=True)
    expect(link).to_have_value(re.compile(rf"^{re.escape(stack.url)}/s/[\w-]{{40,}}/$"))
    expect(link).to_be_focused()
    dialog.get_by_role("button", name="Copy").click()
    expect(dialog.get_by_role("status").first).to_have_text("Copied to the clipboard.")
    copied = page.evaluate("navigator.clipboard.readText()")
    assert copied == link.input_value()
    expect(dialog.locator(".share-item")).to_have_count(1)
    expect(dialog.locator(".share-item")).to_contain_text("Anyone with the link")
    page.keyboard.press("Escape")
    expect(dialog).to_be_hidden()

    reader = page_watched(private)
    reader.goto(copied)
    expect_transcript(reader)
    expect(reader.get_by_role("link", name="Log in to continue")).to_be_visible()
    assert Share.objects.get().view_count == 1

    # The chat's Share button opens the same dialog: the link listed, revocable there.
    page.get_by_role("button", name="Share", exact=True).click()
    item = dialog.locator(".share-item")
    expect(item).to_contain_text("1 view")
    expect(dialog.get_by_label("Link", exact=True)).to_be_hidden()  # shown only once
    item.get_by_role("button", name=re.compile("^Revoke")).click()
    page.get_by_role("dialog", name="Revoke this link?").get_by_role(
        "button", name="Revoke"
    ).click()
    expect(item.locator(".share-status")).to_have_text("revoked")
    expect(dialog.get_by_role("button", name="Close")).to_be_focused()
    reader.reload()
    expect(reader.get_by_role("heading", name="Link not found")).to_be_visible()


def test_a_signed_in_link_shows_to_another_user_who_continues_it_and_asks_strangers_to_log_in(
    page: Page, context: BrowserContext, private: BrowserContext, stack: Stack, sums, outsider
):
    url = link_for(sums, audience="signed_in")

    stranger = private.new_page()
    stranger.goto(url)
    expect(stranger).to_have_url(re.compile(r"/accounts/login/\?next=/s/"))
    expect(stranger.get_by_role("heading", name="Log in")).to_be_visible()

    log_in(context, stack, outsider)
    page.goto(url)
    expect_transcript(page)
    page.get_by_role("button", name="Continue in my account").click()
    expect(page).to_have_url(re.compile(r"/chat/[0-9a-f-]{36}/$"))
    copy = Conversation.objects.get(owner=outsider)
    assert page.url.endswith(f"/chat/{copy.pk}/")
    expect(page.locator("article.message.assistant .content strong")).to_have_text("84")
    expect(page.locator(".tool-card .tool-result")).to_have_text("84")


def test_the_owner_revokes_a_link_from_the_shared_links_page(
    page: Page, context: BrowserContext, private: BrowserContext, stack: Stack, owner, sums
):
    url = link_for(sums)
    reader = page_watched(private)
    reader.goto(url)
    expect(reader.get_by_role("heading", name="Sums")).to_be_visible()

    log_in(context, stack, owner)
    page.goto("/chat/")
    page.get_by_role("link", name="Shared links").click()
    expect(page.get_by_role("heading", name="Shared links")).to_be_visible()
    row = page.locator("tr", has=page.get_by_role("link", name="Sums"))
    expect(row).to_contain_text("active")
    row.get_by_role("button", name=re.compile("^Revoke")).click()
    confirm = page.get_by_role("dialog", name="Revoke this link?")
    confirm.get_by_role("button", name="Revoke").click()
    expect(row.locator(".share-status")).to_have_text("revoked")
    expect(row.get_by_role("button")).to_have_count(0)

    reader.reload()
    expect(reader.get_by_role("heading", name="Link not found")).to_be_visible()
    assert "Sums" not in reader.content()
