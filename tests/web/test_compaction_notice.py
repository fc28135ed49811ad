"""A compaction in the chat page: a small notice, its summary folded until opened, and the
turns it covers still shown."""

import pytest
from playwright.sync_api import Page, expect

from conversations import services
from conversations.models import Message
from conversations.services import NewMessage

pytestmark = pytest.mark.django_db(transaction=True)

SUMMARY = "The user has a grey cat called Tom."


def test_a_compaction_shows_as_a_notice_with_its_summary_folded(chat_page: Page, owner):
    conversation = services.conversation_create(owner=owner, title="Compacted")
    services.messages_append(
        conversation=conversation,
        messages=[
            NewMessage(role=Message.Role.USER, content="My cat is Tom."),
            NewMessage(role=Message.Role.ASSISTANT, content="Noted."),
            NewMessage(
                role=Message.Role.SYSTEM,
                kind=Message.Kind.COMPACTION,
                content=SUMMARY,
                provider_payload={"covers": None},
            ),
        ],
    )
    chat_page.goto(f"/chat/{conversation.pk}/")
    notice = chat_page.locator("article.message.compaction")
    expect(notice.locator("summary")).to_have_text("Earlier turns summarised for the model")
    expect(notice.get_by_text(SUMMARY)).to_be_hidden()
    notice.locator("summary").click()
    expect(notice.get_by_text(SUMMARY)).to_be_visible()
    # The turns the summary covers stay in the transcript.
    expect(chat_page.get_by_text("My cat is Tom.")).to_be_visible()
