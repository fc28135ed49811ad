"""Branches in the browser: edit a question in place, regenerate a reply, switch between
versions ("< k/n >"), a second tab following along, and the refusals (a reply running, a
lost connection) that never lose the user's edited text."""

import re

import pytest
from django.test import Client
from playwright.sync_api import Locator, Page, Route, expect

from conversations import services
from conversations.models import Conversation, Message, Run
from tests.support.browser import Stack, wait_idle
from tests.support.fake_openai import Script
from tests.support.waiting import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

STORY = "".join(f"word{i} " for i in range(40)).strip()
TRIP = ["Where should I go?", "Lisbon.", "And after that?", "Porto."]


def trip(owner) -> Conversation:
    conversation = services.conversation_create(owner=owner, title="Trip")
    services.messages_append(
        conversation=conversation,
        messages=[
            services.NewMessage(role="user" if n % 2 == 0 else "assistant", content=text)
            for n, text in enumerate(TRIP)
        ],
    )
    conversation.refresh_from_db()
    return conversation


def texts(page: Page) -> Locator:
    """What each entry says, in order (a question's text, a turn's answer)."""
    return page.locator("article.message .content:not(:empty)")


def open_editor(page: Page, question: Locator) -> Locator:
    question.hover()
    question.get_by_role("button", name="Edit").click()
    return question.get_by_role("textbox", name="Edit your message")


def regenerate(turn: Locator) -> None:
    turn.hover()
    turn.get_by_role("button", name="Regenerate").click()


def active_branch(conversation: Conversation) -> str:
    conversation.refresh_from_db()
    return str(conversation.active_branch_id)


def test_edit_a_question_in_place_and_the_new_path_streams_in(chat_page: Page, stack: Stack, owner):
    conversation = trip(owner)
    root = active_branch(conversation)
    chat_page.goto(f"/chat/{conversation.pk}/")
    expect(texts(chat_page)).to_have_text(TRIP)
    expect(chat_page.locator(".versions")).to_have_count(0)  # one version of everything
    first = chat_page.locator("article.message.user").first

    # The editor opens in place of the message, with its text; Esc and Cancel leave it be.
    editor = open_editor(chat_page, first)
    expect(editor).to_have_value("Where should I go?")
    expect(editor).to_be_focused()
    expect(first.get_by_role("button", name="Save & submit")).to_be_visible()
    expect(first.locator(".content")).to_be_hidden()
    editor.press("Escape")
    expect(editor).to_have_count(0)
    expect(first.locator(".content")).to_have_text("Where should I go?")
    editor = open_editor(chat_page, first)
    editor.fill("Something else")
    first.get_by_role("button", name="Cancel").click()
    expect(editor).to_have_count(0)
    expect(texts(chat_page)).to_have_text(TRIP)

    # Ctrl+Enter saves: the later messages go, the new text shows, the reply streams in.
    stack.fake.push(Script(text=STORY, tokens_per_second=25))
    editor = open_editor(chat_page, first)
    editor.fill("Where should I go in winter?")
    editor.press("Control+Enter")
    question = chat_page.locator("article.message.user")
    expect(question.locator(".content")).to_have_text(["Where should I go in winter?"])
    expect(chat_page.locator("#stop")).to_be_visible()
    chat_page.wait_for_function(
        """() => {
          const c = document.querySelector("article.message.assistant .content");
          return c && c.textContent.includes("word3 ") && !c.textContent.includes("word39");
        }"""
    )
    expect(texts(chat_page)).to_have_count(2)
    # While it runs, editing and regenerating wait, and say why.
    edit = question.get_by_role("button", name="Edit")
    expect(edit).to_be_disabled()
    expect(edit).to_have_attribute("title", re.compile("Wait for the reply to finish"))
    regen = chat_page.locator("article.message.assistant").get_by_role("button", name="Regenerate")
    expect(regen).to_be_disabled()
    expect(regen).to_have_attribute("title", re.compile("Wait for the reply to finish"))
    wait_idle(chat_page)
    expect(texts(chat_page)).to_have_text(["Where should I go in winter?", STORY])
    expect(edit).to_be_enabled()
    versions = question.get_by_role("group", name="Version 2 of 2")
    expect(versions).to_contain_text("2/2")
    expect(versions.get_by_role("button", name="Next version")).to_be_disabled()
    edited = active_branch(conversation)
    assert edited != root
    assert stack.fake.requests[-1].body["messages"][-1]["content"] == "Where should I go in winter?"

    # A reload shows the same version.
    chat_page.reload()
    expect(texts(chat_page)).to_have_text(["Where should I go in winter?", STORY])
    expect(chat_page.get_by_role("group", name="Version 2 of 2")).to_be_visible()

    # Previous goes back to the first version, without reloading the page; it stays chosen.
    chat_page.evaluate("window.__samePage = true")
    chat_page.get_by_role("button", name="Previous version").click()
    expect(texts(chat_page)).to_have_text(TRIP)
    expect(chat_page.locator("article.message.user").first.locator(".versions")).to_have_attribute(
        "aria-label", "Version 1 of 2"
    )
    assert chat_page.evaluate("window.__samePage") is True
    assert active_branch(conversation) == root
    chat_page.reload()
    expect(texts(chat_page)).to_have_text(TRIP)
    chat_page.get_by_role("button", name="Next version").click()
    expect(texts(chat_page)).to_have_text(["Where should I go in winter?", STORY])
    assert active_branch(conversation) == edited
    assert not chat_page.errors  # type: ignore[attr-defined]


def test_regenerate_replaces_the_reply_and_both_versions_stay_reachable(
    chat_page: Page, stack: Stack, owner
):
    conversation = trip(owner)
    chat_page.goto(f"/chat/{conversation.pk}/")
    expect(texts(chat_page)).to_have_text(TRIP)

    # Regenerating the first turn answers its question again; what came after goes.
    stack.fake.push(Script(text="Madeira, for the sun.", tokens_per_second=20))
    regenerate(chat_page.locator("article.message.assistant").first)
    expect(texts(chat_page)).to_have_count(2)
    expect(chat_page.locator("#stop")).to_be_visible()
    wait_idle(chat_page)
    expect(texts(chat_page)).to_have_text(["Where should I go?", "Madeira, for the sun."])
    turn = chat_page.locator("article.message.assistant")
    expect(turn).to_have_count(1)
    expect(turn.get_by_role("group", name="Version 2 of 2")).to_be_visible()
    # The model was asked the same question again, without the old answer.
    sent = stack.fake.requests[-1].body["messages"]
    assert [m["content"] for m in sent if m["role"] in ("user", "assistant")] == [TRIP[0]]

    # The last reply regenerated again: a third version.
    stack.fake.push(Script(text="The Azores."))
    regenerate(turn)
    expect(texts(chat_page)).to_have_text(["Where should I go?", "The Azores."])
    wait_idle(chat_page)
    expect(turn.get_by_role("group", name="Version 3 of 3")).to_contain_text("3/3")

    # Previous and Next walk the versions, from the keyboard too.
    turn.get_by_role("button", name="Previous version").click()
    expect(texts(chat_page)).to_have_text(["Where should I go?", "Madeira, for the sun."])
    expect(turn.locator(".versions")).to_have_attribute("aria-label", "Version 2 of 3")
    previous = turn.get_by_role("button", name="Previous version")
    previous.focus()
    chat_page.keyboard.press("Enter")
    expect(texts(chat_page)).to_have_text(TRIP)
    expect(
        chat_page.locator("article.message.assistant").first.locator(".versions")
    ).to_have_attribute("aria-label", "Version 1 of 3")
    chat_page.reload()
    expect(texts(chat_page)).to_have_text(TRIP)
    assert not chat_page.errors  # type: ignore[attr-defined]


def test_a_second_tab_follows_an_edit_a_regeneration_and_a_switch(
    chat_page: Page, context, stack: Stack, owner
):
    conversation = trip(owner)
    other = context.new_page()
    errors: list[str] = []
    other.on("pageerror", lambda error: errors.append(str(error)))
    for tab in (chat_page, other):
        tab.goto(f"/chat/{conversation.pk}/")
        expect(tab.locator("#connection")).to_have_text("Live")
        expect(texts(tab)).to_have_text(TRIP)

    # A regeneration here streams into the other tab's new path too.
    stack.fake.push(Script(text=STORY, tokens_per_second=25))
    regenerate(chat_page.locator("article.message.assistant").last)
    expect(other.locator("#stop")).to_be_visible()
    # Each tab checked in front: a hidden tab's reveal waits for animation frames.
    other.bring_to_front()
    wait_idle(other)
    regenerated = [*TRIP[:3], STORY]
    expect(texts(other)).to_have_text(regenerated)
    expect(other.get_by_role("group", name="Version 2 of 2")).to_be_visible()
    chat_page.bring_to_front()
    wait_idle(chat_page)
    expect(texts(chat_page)).to_have_text(regenerated)

    # A switch there shows here.
    chat_page.get_by_role("button", name="Previous version").click()
    expect(texts(chat_page)).to_have_text(TRIP)
    expect(texts(other)).to_have_text(TRIP)
    expect(other.get_by_role("group", name="Version 1 of 2")).to_be_visible()

    # And an edit, watched from the other tab.
    other.bring_to_front()
    stack.fake.push(Script(text="Then Porto, by train."))
    editor = open_editor(chat_page, chat_page.locator("article.message.user").last)
    editor.fill("And after Lisbon?")
    chat_page.locator("article.message.user").last.get_by_role(
        "button", name="Save & submit"
    ).click()
    edited = [*TRIP[:2], "And after Lisbon?", "Then Porto, by train."]
    expect(texts(other)).to_have_text(edited)
    wait_idle(other)
    chat_page.bring_to_front()
    expect(texts(chat_page)).to_have_text(edited)
    wait_idle(chat_page)
    expect(other.locator("article.message.user").last.locator(".versions")).to_have_attribute(
        "aria-label", "Version 2 of 2"
    )
    # The other tab can carry on from there.
    stack.fake.push(Script(text="About three hours."))
    other.bring_to_front()
    box = other.get_by_label("Message", exact=True)
    box.fill("How long is the train?")
    box.press("Enter")
    wait_idle(other)
    chat_page.bring_to_front()
    expect(texts(chat_page)).to_have_text([*edited, "How long is the train?", "About three hours."])
    assert not errors
    assert not chat_page.errors  # type: ignore[attr-defined]


def test_refusals_say_why_and_never_lose_the_edited_text(chat_page: Page, stack: Stack, owner):
    conversation = trip(owner)
    chat_page.goto(f"/chat/{conversation.pk}/")
    expect(chat_page.locator("#connection")).to_have_text("Live")
    question = chat_page.locator("article.message.user").last
    editor = open_editor(chat_page, question)
    editor.fill("")
    question.get_by_role("button", name="Save & submit").click()
    expect(question.get_by_role("alert")).to_have_text("A message cannot be empty.")

    # A reply started somewhere this page has not heard of: the server refuses (409).
    run = Run.objects.create(conversation=conversation, status="queued")
    editor.fill("And after Porto?\nSomewhere quiet.")
    editor.press("Control+Enter")
    expect(question.get_by_role("alert")).to_have_text(
        "A reply is running: wait for it to finish (or press Stop), then try again."
    )
    expect(editor).to_have_value("And after Porto?\nSomewhere quiet.")
    expect(question.get_by_role("button", name="Save & submit")).to_be_enabled()
    turn = chat_page.locator("article.message.assistant").last
    regenerate(turn)
    expect(turn.get_by_role("alert")).to_contain_text("Cannot regenerate: A reply is running")
    expect(texts(chat_page)).to_have_count(4)
    expect(chat_page.get_by_label("Message", exact=True)).to_be_enabled()  # unlocked again

    # The connection drops: still not lost.
    run.status = "cancelled"
    run.save(update_fields=["status"])

    def unreachable(route: Route) -> None:
        route.abort()

    chat_page.route("**/edit/", unreachable)
    question.get_by_role("button", name="Save & submit").click()
    expect(question.get_by_role("alert")).to_contain_text("Not sent: The server cannot be reached")
    expect(editor).to_have_value("And after Porto?\nSomewhere quiet.")

    # Back online, the same text goes.
    chat_page.unroute("**/edit/")
    stack.fake.push(Script(text="Óbidos."))
    question.get_by_role("button", name="Save & submit").click()
    expect(texts(chat_page)).to_have_text(
        [*TRIP[:2], "And after Porto?\nSomewhere quiet.", "Óbidos."]
    )
    wait_idle(chat_page)

    # Switching while a reply runs is refused too, and says so.
    Run.objects.create(conversation=conversation, status="queued")
    chat_page.get_by_role("button", name="Previous version").click()
    expect(chat_page.locator("article.message.user").last.get_by_role("alert")).to_contain_text(
        "A reply is running"
    )
    expect(texts(chat_page)).to_have_text(
        [*TRIP[:2], "And after Porto?\nSomewhere quiet.", "Óbidos."]
    )
    Run.objects.filter(conversation=conversation).update(status="cancelled")
    assert not chat_page.errors  # type: ignore[attr-defined]


def test_a_regeneration_that_failed_still_offers_the_other_versions(
    chat_page: Page, stack: Stack, owner
):
    conversation = trip(owner)
    chat_page.goto(f"/chat/{conversation.pk}/")
    expect(texts(chat_page)).to_have_text(TRIP)
    stack.fake.push(Script.http(400, message="The model is unwell."))
    regenerate(chat_page.locator("article.message.assistant").last)
    expect(chat_page.get_by_text("The reply failed")).to_be_visible()
    expect(texts(chat_page)).to_have_text(TRIP[:3])
    missing = chat_page.locator(".missing-reply")
    expect(missing).to_contain_text("No reply on this version.")
    expect(missing.get_by_role("group", name="Version 2 of 2")).to_be_visible()

    # After a reload too; and Previous brings the old reply back.
    chat_page.reload()
    expect(texts(chat_page)).to_have_text(TRIP[:3])
    missing.get_by_role("button", name="Previous version").click()
    expect(texts(chat_page)).to_have_text(TRIP)
    expect(missing).to_have_count(0)
    # The attempt that wrote nothing is not a version of the reply (as the server counts).
    expect(chat_page.locator(".versions")).to_have_count(0)
    chat_page.reload()
    expect(texts(chat_page)).to_have_text(TRIP)
    assert not chat_page.errors  # type: ignore[attr-defined]


def test_a_long_conversation_opens_on_the_version_it_shows(chat_page: Page, stack: Stack, owner):
    conversation = services.conversation_create(owner=owner, title="Long")
    services.messages_append(
        conversation=conversation,
        messages=[
            services.NewMessage(role="user" if n % 2 else "assistant", content=f"line {n}")
            for n in range(1, 61)
        ],
    )
    # Edited early through the API: the version shown is 4 messages long, of 62 stored.
    question = Message.objects.get(conversation=conversation, seq=3)
    stack.fake.push(Script(text="A short answer."))
    client = Client()
    client.force_login(owner)
    answer = client.post(
        f"/api/v1/conversations/{conversation.pk}/messages/{question.pk}/edit/",
        {"content": "line 3, again"},
        content_type="application/json",
    )
    assert answer.status_code == 202, answer.content
    run = Run.objects.get(pk=answer.json()["run"]["id"])
    wait_until(lambda: Run.objects.get(pk=run.pk).status == "completed", what="the reply")

    chat_page.goto(f"/chat/{conversation.pk}/")
    expect(texts(chat_page)).to_have_text(["line 1", "line 2", "line 3, again", "A short answer."])

    # Previous shows the long version from the question on, the question staying where it was.
    edited = chat_page.locator("article.message.user").nth(1)
    top = edited.bounding_box()["y"]  # type: ignore[index]
    edited.get_by_role("button", name="Previous version").click()
    expect(texts(chat_page)).to_have_count(60)
    expect(texts(chat_page).nth(2)).to_have_text("line 3")
    assert abs(chat_page.locator("article.message.user").nth(1).bounding_box()["y"] - top) < 2  # type: ignore[index]
    expect(chat_page.get_by_text("line 60", exact=True)).to_be_attached()

    # Reopened, the long version shows its newest page; older messages load on scrolling up.
    chat_page.reload()
    expect(chat_page.get_by_text("line 60", exact=True)).to_be_visible()
    expect(chat_page.get_by_text("line 3", exact=True)).not_to_be_attached()
    chat_page.locator("#messages").evaluate("(box) => { box.scrollTop = 0; }")
    expect(texts(chat_page)).to_have_count(60)
    expect(chat_page.get_by_role("group", name="Version 1 of 2")).to_be_attached()
    assert not chat_page.errors  # type: ignore[attr-defined]
