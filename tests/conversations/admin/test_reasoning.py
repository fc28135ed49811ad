"""A reasoning model's thoughts in the admin: collapsed in the transcript for readers, and
as private as the reply itself for everyone else."""

import pytest
from django.urls import reverse

from conversations import services
from conversations.models import Message
from conversations.services import NewMessage
from tests.support.admin import chat, client_for

pytestmark = pytest.mark.django_db

THOUGHT = "The user wants <b>bold</b> help; be brief."


def thinking_chat(owner):
    conversation = chat(owner, turns=1)
    services.message_append(
        conversation=conversation,
        message=NewMessage(
            role="assistant", content="Brief help.", reasoning=THOUGHT, reasoning_ms=4100
        ),
    )
    return conversation


def test_the_transcript_shows_the_thoughts_collapsed_above_the_reply(reader, owner):
    conversation = thinking_chat(owner)
    url = reverse("admin:conversations_conversation_transcript", args=[conversation.pk])

    body = client_for(reader).get(url).content.decode()

    details = body[body.index('<details class="reasoning">') :]
    details = details[: details.index("</details>")]
    assert '<details class="reasoning"><summary>' in body  # closed until opened
    assert "thought for 4100 ms" in details
    assert "The user wants &lt;b&gt;bold&lt;/b&gt; help; be brief." in details  # escaped
    assert body.index("</details>") < body.index("Brief help.")


def test_staff_without_the_transcript_permission_never_see_or_search_the_thoughts(
    moderator, reader, owner
):
    conversation = thinking_chat(owner)
    reply = Message.objects.get(conversation=conversation, reasoning=THOUGHT)
    detail = reverse("admin:conversations_message_change", args=[reply.pk])
    changelist = reverse("admin:conversations_message_changelist")

    assert "be brief" not in client_for(moderator).get(detail).content.decode()
    assert "be brief" in client_for(reader).get(detail).content.decode()
    # A lookup on the thoughts would read them out one letter at a time.
    probe = client_for(moderator).get(changelist, {"reasoning__startswith": "The"})
    assert probe.status_code == 400
