"""Tool servers in the browser, against the real stack and a real MCP server: a user sets
their own token in the settings dialog (which then says only that one is set), enables
the server's tool there, asks, and the card, named "server · tool", shows the result the
server gave for their token; a user without a token reads in the card where to set it,
and its button opens the settings at that field; an image a tool returns shows on its
card, after a reload too."""

from collections.abc import Iterator
from typing import Any

import pytest
from playwright.sync_api import BrowserContext, Locator, Page, expect

from accounts.models import User
from conversations import services
from conversations.models import ToolServer
from tests.support.browser import Stack, log_in, send, wait_idle
from tests.support.fake_openai import FakeOpenAI, Script
from tests.support.mcp_servers import McpServerProcess, mcp_server_start, server_register

pytestmark = pytest.mark.django_db(transaction=True)

ALICE_TOKEN = "token-of-alice-Wq3"
CREDENTIAL_ERROR = "people__whoami failed: credential missing or refused: set your token for people"


@pytest.fixture(scope="module")
def mcp_servers() -> Iterator[dict[str, McpServerProcess]]:
    """Started for the module: the stack's processes reach them as any server would."""
    started: dict[str, McpServerProcess] = {}
    try:
        for kind in ("tokens", "varied"):
            started[kind] = mcp_server_start(kind)
        yield started
    finally:
        for server in started.values():
            server.stop()


@pytest.fixture
def people(mcp_servers: dict[str, McpServerProcess]) -> ToolServer:
    """The token server, where each user brings their own token."""
    return server_register("people", mcp_servers["tokens"], auth="per_user")


def model_calls(fake: FakeOpenAI, call: tuple[str, str, str], answer: str = "Done.") -> None:
    """A model that asks for `call`, then answers once it has the result."""

    def respond(body: dict[str, Any]) -> Script:
        answered = any(m.get("role") == "tool" for m in body.get("messages", []))
        return Script(text=answer) if answered else Script(tool_calls=[call])

    fake.respond_with(respond)


def open_settings(page: Page) -> Locator:
    page.get_by_role("button", name="Settings").click()
    dialog = page.get_by_role("dialog", name="Conversation settings")
    expect(dialog).to_be_visible()
    return dialog


def server_group(dialog: Locator, name: str) -> Locator:
    return dialog.get_by_role("group", name=name, exact=True)


def test_a_user_sets_their_token_enables_the_tool_and_its_card_shows_the_result(
    chat_page: Page, stack: Stack, owner: User, people: ToolServer
):
    model_calls(stack.fake, ("call_who", "people__whoami", "{}"), answer="You are Alice.")
    chat_page.goto("/chat/")
    dialog = open_settings(chat_page)
    group = server_group(dialog, "people")
    # No token yet, and none of anyone's to read its tools with.
    expect(group.locator(".server-status")).to_have_text("Set your token below to use its tools.")
    expect(group.locator(".credential-state")).to_have_text("No token")
    expect(group.get_by_role("button", name="Remove token")).to_be_disabled()

    token = group.get_by_label("Your token for people")
    expect(token).to_have_attribute("type", "password")
    token.fill(ALICE_TOKEN)
    group.get_by_role("button", name="Save token").click()

    # Said set, never shown: the field is emptied, and the server's tools are listed.
    expect(group.locator(".credential-state")).to_have_text("Token set")
    expect(token).to_have_value("")
    expect(group.locator(".server-status")).to_be_hidden()
    expect(group.get_by_role("checkbox")).to_have_count(2)
    assert ALICE_TOKEN not in dialog.inner_html()
    group.get_by_role("checkbox", name="whoami").check()
    dialog.get_by_role("button", name="Save", exact=True).click()
    expect(dialog).to_be_hidden()

    send(chat_page, "Who am I?")
    wait_idle(chat_page)

    card = chat_page.locator('.tool-card[data-call-id="call_who"]')
    expect(card).to_have_attribute("data-state", "done")
    expect(card.locator(".tool-name")).to_have_text("people · whoami")
    expect(card).to_have_attribute("aria-label", "Tool call: people · whoami")
    # The server saw Alice's own token.
    expect(card.locator(".tool-result")).to_have_text(f"token={ALICE_TOKEN}")
    expect(chat_page.locator("article.message.assistant .content").last).to_have_text(
        "You are Alice."
    )
    conversation = owner.conversations.get()
    assert conversation.tools[-1] == "people__whoami"

    # Opened again, the dialog remembers the tool and the token, still without showing it.
    dialog = open_settings(chat_page)
    group = server_group(dialog, "people")
    expect(group.get_by_role("checkbox", name="whoami")).to_be_checked()
    expect(group.locator(".credential-state")).to_have_text("Token set")
    expect(group.get_by_label("Your token for people")).to_have_value("")
    # Removed, the server's status says a token is wanted again.
    group.get_by_role("button", name="Remove token").click()
    expect(group.locator(".credential-state")).to_have_text("No token")
    expect(group.locator(".server-status")).to_have_text("Set your token below to use its tools.")
    assert not people.credentials.exists()
    assert not chat_page.errors  # type: ignore[attr-defined]


def test_a_user_without_a_token_is_told_in_the_card_where_to_set_it(
    page: Page,
    context: BrowserContext,
    stack: Stack,
    owner: User,
    outsider: User,
    people: ToolServer,
):
    # Alice's token reads the server's list, so Mallory is offered its tools too.
    services.tool_credential_set(server=people, user=owner, token=ALICE_TOKEN)
    conversation = services.conversation_create(
        owner=outsider, title="Who", tools=["people__whoami"]
    )
    model_calls(stack.fake, ("call_who", "people__whoami", "{}"), answer="No token, no answer.")
    log_in(context, stack, outsider)
    page.goto(f"/chat/{conversation.pk}/")
    expect(page.locator("#connection")).to_have_text("Live")

    send(page, "Who am I?")
    wait_idle(page)

    card = page.locator('.tool-card[data-call-id="call_who"]')
    expect(card).to_have_attribute("data-state", "error")
    expect(card.locator(".tool-result")).to_have_text(CREDENTIAL_ERROR)
    expect(card.locator(".tool-hint")).to_contain_text("needs your own token")
    # Nothing of Alice's reached Mallory.
    assert ALICE_TOKEN not in page.content()

    card.get_by_role("button", name="Set your token for people").click()
    dialog = page.get_by_role("dialog", name="Conversation settings")
    token = server_group(dialog, "people").get_by_label("Your token for people")
    expect(token).to_be_focused()
    # A token the server cannot take is refused with the reason, and nothing is set.
    token.fill("two words")
    token.press("Enter")
    group = server_group(dialog, "people")
    expect(group.get_by_role("alert")).to_contain_text("Token: must be visible ASCII")
    expect(group.locator(".credential-state")).to_have_text("No token")
    expect(dialog).to_be_visible()
    assert not people.credentials.filter(user=outsider).exists()

    # After a reload the card still says where to set it.
    page.keyboard.press("Escape")
    page.reload()
    expect(page.locator('.tool-card[data-call-id="call_who"] .tool-hint')).to_be_visible()
    assert not page.errors  # type: ignore[attr-defined]


def test_an_image_a_tool_returns_shows_on_its_card(
    chat_page: Page, stack: Stack, owner: User, mcp_servers: dict[str, McpServerProcess]
):
    server_register("kit", mcp_servers["varied"])
    conversation = services.conversation_create(owner=owner, title="Art", tools=["kit__picture"])
    model_calls(stack.fake, ("call_pic", "kit__picture", "{}"), answer="Here is a pixel.")
    chat_page.goto(f"/chat/{conversation.pk}/")
    expect(chat_page.locator("#connection")).to_have_text("Live")

    send(chat_page, "Draw me something")
    wait_idle(chat_page)

    card = chat_page.locator('.tool-card[data-call-id="call_pic"]')
    expect(card.locator(".tool-name")).to_have_text("kit · picture")
    expect(card.locator(".tool-result")).to_have_text("a pixel\n[image: kit-picture-1.png]")
    image = card.get_by_role("img", name="kit-picture-1.png")
    expect(image).to_have_js_property("naturalWidth", 1)  # served to its owner
    chat_page.reload()
    image = chat_page.locator('.tool-card[data-call-id="call_pic"]').get_by_role(
        "img", name="kit-picture-1.png"
    )
    expect(image).to_have_js_property("naturalWidth", 1)
