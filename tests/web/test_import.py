"""Import from the sidebar: a Parley export opens as a new conversation; a data export of
many conversations is summed up; a file the server refuses says why."""

import json
from pathlib import Path

import pytest
from django.test import Client
from playwright.sync_api import Page, Route, expect

from conversations import services
from conversations.models import Conversation
from tests.support.browser import Stack

pytestmark = pytest.mark.django_db(transaction=True)


def choose_file(page: Page, path: Path) -> None:
    with page.expect_file_chooser() as chooser:
        page.get_by_role("button", name="Import").click()
    chooser.value.set_files(str(path))


def test_an_exported_conversation_imports_and_opens_with_the_same_messages(
    chat_page: Page, stack: Stack, owner, tmp_path: Path
):
    source = services.conversation_create(owner=owner, title="Recipes")
    calls = [{"id": "call_1", "name": "calculator", "arguments": '{"expression": "2*250"}'}]
    services.messages_append(
        conversation=source,
        messages=[
            services.NewMessage(role="user", content="Double the flour (250 g)."),
            services.NewMessage(role="assistant", content="Let me compute.", tool_calls=calls),
            services.NewMessage(
                role="tool", content="500", tool_call_id="call_1", name="calculator"
            ),
            services.NewMessage(role="assistant", content="Use **500 g** of flour."),
        ],
    )
    client = Client()
    client.force_login(owner)
    exported = client.get(f"/api/v1/conversations/{source.pk}/export/?format=json")
    assert exported.status_code == 200
    path = tmp_path / "recipes.json"
    path.write_bytes(b"".join(exported.streaming_content))  # type: ignore[attr-defined]

    chat_page.goto("/chat/")
    expect(chat_page.locator(".conversation-item")).to_have_count(1)
    chat_page.evaluate("window.__samePage = true")
    choose_file(chat_page, path)

    expect(chat_page.locator("#import-status")).to_have_text("Imported “Recipes”.")
    imported = Conversation.objects.exclude(pk=source.pk).get(owner=owner)
    expect(chat_page).to_have_url(f"{stack.url}/chat/{imported.pk}/")
    expect(chat_page.locator("#chat-title")).to_have_text("Recipes")
    expect(chat_page.locator("article.message .content")).to_have_text(
        ["Double the flour (250 g).", "Let me compute.", "Use 500 g of flour."]
    )
    expect(chat_page.locator('.tool-card[data-call-id="call_1"] .tool-result')).to_have_text("500")
    expect(chat_page.locator(".conversation-item")).to_have_count(2)
    current = chat_page.locator(".conversation-link[aria-current=page]")
    expect(current).to_have_attribute("href", f"/chat/{imported.pk}/")
    assert chat_page.evaluate("window.__samePage") is True

    def texts(conversation: Conversation) -> list[tuple[str, str]]:
        return list(conversation.messages.order_by("seq").values_list("role", "content"))

    assert texts(imported) == texts(source)
    assert not chat_page.errors  # type: ignore[attr-defined]


def test_a_file_the_server_refuses_says_why(chat_page: Page, stack: Stack, owner, tmp_path: Path):
    path = tmp_path / "broken.json"
    # The short form the import accepts, with one message of a role that does not exist.
    broken = {"title": "Broken", "messages": [{"role": "wizard", "content": "Abracadabra"}]}
    path.write_text(json.dumps(broken))
    chat_page.goto("/chat/")
    choose_file(chat_page, path)
    status = chat_page.locator("#import-status")
    expect(status).to_contain_text("Import failed: Invalid request")
    expect(status).to_have_class("import-status small error")
    expect(status.locator("li")).to_contain_text(["$.messages[0].role"])
    expect(chat_page).to_have_url(f"{stack.url}/chat/")
    assert Conversation.objects.filter(owner=owner).count() == 0

    path.write_text("not json at all")
    choose_file(chat_page, path)  # the same file again
    expect(status).not_to_contain_text("$.messages[0].role")
    expect(status).to_contain_text("Import failed:")
    expect(status).to_contain_text("JSON")
    assert not chat_page.errors  # type: ignore[attr-defined]


def test_a_report_of_many_conversations_is_summed_up_and_the_list_refreshed(
    chat_page: Page, stack: Stack, owner, tmp_path: Path
):
    path = tmp_path / "conversations.json"
    path.write_text("[]")
    chat_page.goto("/chat/")
    expect(chat_page.locator("#list-status")).to_have_text("No conversations yet.")
    # The server's answer for a ChatGPT data export: what it imported, and what failed.
    first = services.conversation_create(owner=owner, title="Holiday ideas")
    second = services.conversation_create(owner=owner, title="Tax questions")
    report = {
        "results": [
            {
                "index": 0,
                "title": "Holiday ideas",
                "status": "imported",
                "conversation": {"id": str(first.pk)},
            },
            {
                "index": 1,
                "title": "Broken chat",
                "status": "failed",
                "error": {
                    "code": "invalid",
                    "message": "Its messages form a cycle.",
                    "details": None,
                },
            },
            {
                "index": 2,
                "title": "Tax questions",
                "status": "imported",
                "conversation": {"id": str(second.pk)},
            },
        ],
        "imported": 2,
        "failed": 1,
    }
    sent: list[str] = []

    def answer(route: Route) -> None:
        sent.append(route.request.post_data or "")
        route.fulfill(status=201, content_type="application/json", body=json.dumps(report))

    chat_page.route("**/api/v1/conversations/import/", answer)
    choose_file(chat_page, path)

    status = chat_page.locator("#import-status")
    expect(status.locator("p")).to_have_text("Imported 2 of 3 conversations.")
    expect(status.locator("li")).to_have_text(["Broken chat: Its messages form a cycle."])
    expect(chat_page.locator(".conversation-item")).to_have_count(2)
    expect(chat_page.locator(".conversation-item", has_text="Holiday ideas")).to_be_visible()
    expect(chat_page).to_have_url(f"{stack.url}/chat/")
    assert sent == ["[]"]  # the file's bytes, as they are
