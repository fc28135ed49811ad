"""Files in the browser: attached with the button, dropped on the chat or pasted into the
box, each uploaded at once with a progress bar and shown as a chip; sent with the text;
drawn in the transcript as thumbnails and download chips, after a reload too; refusals
said beside the box, with the typed text and the other files kept."""

import base64
import io
import os
import re
import time
import zipfile
from pathlib import Path
from typing import Any

import pytest
from PIL import Image, ImageDraw
from playwright.sync_api import FilePayload, Locator, Page, Route, expect

from conversations import services
from conversations.models import Attachment, Conversation, Message, StoredFile
from tests.support.browser import TIMEOUT_MS, Stack, send, wait_idle
from tests.support.fake_openai import Script
from tests.support.files import PDF, file_make, pdf_bytes

pytestmark = pytest.mark.django_db(transaction=True)

# Small limits, so a refusal needs only a small file.
MAX_BYTES = 64 * 1024
STACK_ENV = {
    "PARLEY_FILE_MAX_BYTES": str(MAX_BYTES),
    "PARLEY_FILE_QUOTA_BYTES": "100000",
    "PARLEY_FILE_MAX_PER_MESSAGE": "3",
}
REPORT_TEXT = "Revenue grew 12 percent in the third quarter."
REPORT = pdf_bytes(REPORT_TEXT)
SCREENSHOTS = Path(__file__).resolve().parents[2] / "docs" / "screenshots"


@pytest.fixture(autouse=True)
def file_storage() -> None:
    """Files made by a test here are served by the stack's processes, which keep bytes
    where the settings say: so the test does too (not in a directory of its own)."""
    return None


def screenshot_png(width: int = 96, height: int = 64) -> bytes:
    """A small picture with something in it (a thumbnail of one colour shows nothing)."""
    image = Image.new("RGB", (width, height), (232, 237, 255))
    draw = ImageDraw.Draw(image)
    draw.rectangle((0, 0, width, height // 5), fill=(59, 91, 219))
    for row in range(3):
        top = height // 3 + row * height // 6
        draw.rectangle(
            (width // 10, top, width * (9 - 2 * row) // 10, top + height // 14),
            fill=(120, 120, 130),
        )
    out = io.BytesIO()
    image.save(out, "PNG")
    return out.getvalue()


def payload(name: str, data: bytes, mime: str) -> FilePayload:
    return {"name": name, "mimeType": mime, "buffer": data}


def attach_with_button(page: Page, *files: FilePayload) -> None:
    with page.expect_file_chooser() as chooser:
        page.get_by_role("button", name="Attach files").click()
    chooser.value.set_files(list(files))


def drop_on(page: Page, selector: str, file: FilePayload) -> None:
    """Drop a file on an element as the browser does (dragenter, dragover, drop)."""
    transfer = page.evaluate_handle(
        """([name, data, type]) => {
          const transfer = new DataTransfer();
          const bytes = Uint8Array.from(atob(data), (c) => c.charCodeAt(0));
          transfer.items.add(new File([bytes], name, { type }));
          return transfer;
        }""",
        [file["name"], base64.b64encode(file["buffer"]).decode(), file["mimeType"]],
    )
    for event in ("dragenter", "dragover", "drop"):
        page.dispatch_event(selector, event, {"dataTransfer": transfer})


def held_request(page: Page, held: list[Route]) -> Route:
    """The first request a route handler kept back (the page's events pumped meanwhile)."""
    deadline = time.monotonic() + TIMEOUT_MS / 1000
    while not held and time.monotonic() < deadline:
        page.wait_for_timeout(20)
    assert held, "no request was routed"
    return held[0]


def chips(page: Page) -> Locator:
    return page.locator("#composer-files .upload")


def problems(page: Page) -> Locator:
    return page.locator("#composer-problems [role=alert]")


def test_a_screenshot_and_a_pdf_go_with_a_message_and_stay_after_a_reload(
    chat_page: Page, stack: Stack, owner
):
    stack.fake.push(Script(text="A picture of a page, and a report."))
    chat_page.goto("/chat/")
    send_button = chat_page.get_by_role("button", name="Send")

    # The image uploads at once: while it does, its chip has a progress bar and the
    # message cannot be sent.
    held: list[Route] = []
    chat_page.route("**/api/v1/files/", lambda route: held.append(route))
    attach_with_button(chat_page, payload("screenshot.png", screenshot_png(), "image/png"))
    chip = chips(chat_page).filter(has_text="screenshot.png")
    expect(chip).to_have_attribute("data-state", "uploading")
    expect(chip.get_by_role("progressbar", name="Uploading screenshot.png")).to_be_visible()
    expect(chip.locator("img")).to_have_js_property("naturalWidth", 96)  # the local preview
    expect(send_button).to_be_disabled()
    upload = held_request(chat_page, held)
    upload.continue_()
    chat_page.unroute("**/api/v1/files/")
    expect(chip).to_have_attribute("data-state", "done")
    expect(chip.get_by_role("progressbar")).to_have_count(0)
    expect(send_button).to_be_enabled()

    # A PDF dropped on the chat: a chip with an icon, its name and size.
    drop_on(chat_page, "#messages", payload("report.pdf", REPORT, "application/pdf"))
    pdf_chip = chips(chat_page).filter(has_text="report.pdf")
    expect(pdf_chip).to_have_attribute("data-state", "done")
    expect(pdf_chip).to_contain_text(human_size(len(REPORT)))
    expect(pdf_chip.locator(".file-icon")).to_be_visible()

    send(chat_page, "What is in these?")
    question = chat_page.locator("article.message.user")
    expect(question.locator(".content")).to_have_text("What is in these?")
    expect(chips(chat_page)).to_have_count(0)  # the files went with the message
    wait_idle(chat_page)

    message = Message.objects.get(role="user", conversation__owner=owner)
    stored = [a.file for a in Attachment.objects.filter(message=message).select_related("file")]
    assert [f.filename for f in stored] == ["screenshot.png", "report.pdf"]
    assert [f.content_type for f in stored] == ["image/png", "application/pdf"]
    # The model got the picture itself and the PDF's text.
    question_sent = [m for m in stack.fake.requests[-1].messages if m["role"] == "user"][-1]
    assert question_sent["content"] == [
        {"type": "image_url", "image_url": {"url": data_url(screenshot_png(), "image/png")}},
        {"type": "text", "text": f"[file: report.pdf, 1 page]\n{REPORT_TEXT}"},
        {"type": "text", "text": "What is in these?"},
    ]

    for page in (chat_page, reloaded(chat_page)):
        question = page.locator("article.message.user")
        image = question.get_by_role("img", name="screenshot.png")
        expect(image).to_have_attribute("src", f"/api/v1/files/{stored[0].pk}/content")
        expect(image).to_have_attribute("loading", "lazy")
        expect(image).to_have_js_property("naturalWidth", 96)
        document = question.get_by_role("link", name="report.pdf")
        expect(document).to_contain_text(human_size(len(REPORT)))

    # A click opens the image in a new tab and downloads the PDF.
    with chat_page.context.expect_page() as opened:
        image.click()
    assert opened.value.url.endswith(f"/api/v1/files/{stored[0].pk}/content")
    opened.value.close()
    with chat_page.expect_download() as download:
        document.click()
    assert download.value.suggested_filename == "report.pdf"
    assert Path(download.value.path()).read_bytes() == REPORT

    # Exported as a ZIP with its files, and imported back: the same files, bytes and all.
    title = message.conversation.title
    chat_page.get_by_label(f"Actions for {title}").click()
    with chat_page.expect_download() as exported:
        sidebar_item(chat_page, title).get_by_role("link", name="Export ZIP, with files").click()
    archive = Path(exported.value.path()).read_bytes()
    with zipfile.ZipFile(io.BytesIO(archive)) as opened_zip:
        assert sorted(opened_zip.namelist()) == sorted(
            ["conversation.json", *(f"files/{f.sha256}" for f in stored)]
        )
    chat_page.keyboard.press("Escape")
    chat_page.locator("#import-file").set_input_files(
        [payload("export.zip", archive, "application/zip")]
    )
    expect(chat_page.locator("#import-status")).to_contain_text("Imported")
    copy = Conversation.objects.exclude(pk=message.conversation_id).get(owner=owner)
    copied = Attachment.objects.filter(conversation=copy).select_related("file")
    assert [(a.file.filename, a.file.sha256) for a in copied] == [
        (f.filename, f.sha256) for f in stored
    ]
    storage = services.files_storage()
    for attachment in copied:
        with storage.open(attachment.file.storage_name) as stream:
            assert stream.read() == (screenshot_png() if attachment.position == 0 else REPORT)
    expect(
        chat_page.locator("article.message.user").get_by_role("img", name="screenshot.png")
    ).to_be_visible()

    # Deleting both conversations (same title) takes the files away, bytes and all.
    for left in (1, 0):
        delete_from_sidebar(chat_page, title, left=left)
    services.files_released_sweep()
    assert not StoredFile.objects.filter(owner=owner).exists()
    assert not [f for f in stored if storage.exists(f.storage_name)]
    assert not chat_page.errors  # type: ignore[attr-defined]


def sidebar_item(page: Page, title: str) -> Locator:
    return page.locator(".conversation-item", has_text=title).first


def delete_from_sidebar(page: Page, title: str, *, left: int) -> None:
    """Delete the first conversation of that title, `left` of them remaining."""
    page.get_by_label(f"Actions for {title}").first.click()
    sidebar_item(page, title).get_by_role("button", name="Delete").click()
    page.get_by_role("dialog").get_by_role("button", name="Delete").click()
    expect(page.locator(".conversation-item", has_text=title)).to_have_count(left)


def data_url(data: bytes, content_type: str) -> str:
    return f"data:{content_type};base64,{base64.b64encode(data).decode()}"


def human_size(size: int) -> str:
    """A size as the chips show it (under a megabyte)."""
    if size < 1024:
        return f"{size} B"
    kib = size / 1024
    return f"{round(kib) if kib >= 10 else f'{kib:.1f}'} KB"


def reloaded(page: Page) -> Page:
    page.reload()
    return page


def test_refusals_are_said_beside_the_box_and_the_text_and_other_files_stay(
    chat_page: Page, stack: Stack, owner
):
    stack.fake.push(Script(text="Noted."))
    chat_page.goto("/chat/")
    box = chat_page.get_by_label("Message", exact=True)
    box.fill("Keep this text")
    attach_with_button(chat_page, payload("kept.png", screenshot_png(), "image/png"))
    expect(chips(chat_page)).to_have_attribute("data-state", "done")

    # Too large (known before a byte is sent) and of a type the server refuses.
    attach_with_button(
        chat_page,
        payload("big.txt", b"a" * (MAX_BYTES + 1), "text/plain"),
        payload("page.html", b"<!doctype html><html><body>hi</body></html>", "text/html"),
    )
    expect(problems(chat_page)).to_have_text(
        [
            "“big.txt” was not added: it is larger than 64 KB, the limit for one file.",
            re.compile(r"^“page\.html” was not added: .*not accepted"),
        ]
    )
    expect(chips(chat_page)).to_have_count(1)
    expect(box).to_have_value("Keep this text")

    # Over the storage quota: the server's words.
    attach_with_button(chat_page, payload("one.txt", b"1" * 60_000, "text/plain"))
    expect(chips(chat_page)).to_have_count(2)
    expect(chips(chat_page).last).to_have_attribute("data-state", "done")
    attach_with_button(chat_page, payload("two.txt", b"2" * 60_000, "text/plain"))
    expect(problems(chat_page)).to_contain_text("“two.txt” was not added:")
    expect(problems(chat_page)).to_contain_text("delete some files to upload more")
    expect(chips(chat_page)).to_have_count(2)

    # More than a message may carry: the rest are refused, by name.
    attach_with_button(
        chat_page,
        payload("a.txt", b"a", "text/plain"),
        payload("b.txt", b"b", "text/plain"),
    )
    expect(problems(chat_page)).to_have_text(
        ["“b.txt” was not added: at most 3 files can go with one message."]
    )
    expect(chips(chat_page)).to_have_count(3)
    expect(box).to_have_value("Keep this text")

    # A chip removed is not sent; the rest go with the kept text.
    chat_page.get_by_role("button", name="Remove a.txt").click()
    expect(chips(chat_page)).to_have_count(2)
    box.press("Enter")
    question = chat_page.locator("article.message.user")
    expect(question.get_by_role("img", name="kept.png")).to_be_visible()
    expect(question.get_by_role("link", name="one.txt")).to_be_visible()
    expect(problems(chat_page)).to_have_count(0)
    wait_idle(chat_page)
    message = Message.objects.get(role="user", conversation__owner=owner)
    assert message.content == "Keep this text"
    assert Attachment.objects.filter(message=message).count() == 2


def test_a_pasted_image_becomes_a_chip_and_a_message_may_be_files_alone(
    chat_page: Page, stack: Stack, owner
):
    stack.fake.push(Script(text="A screenshot."))
    chat_page.goto("/chat/")
    box = chat_page.get_by_label("Message", exact=True)
    box.focus()
    box.evaluate(
        """(box, data) => {
          const transfer = new DataTransfer();
          const bytes = Uint8Array.from(atob(data), (c) => c.charCodeAt(0));
          transfer.items.add(new File([bytes], "image.png", { type: "image/png" }));
          const paste = { clipboardData: transfer, bubbles: true, cancelable: true };
          box.dispatchEvent(new ClipboardEvent("paste", paste));
        }""",
        base64.b64encode(screenshot_png()).decode(),
    )
    expect(chips(chat_page)).to_have_attribute("data-state", "done")
    expect(chips(chat_page)).to_contain_text("image.png")
    expect(box).to_have_value("")

    box.press("Enter")  # no text: the image alone is the message
    question = chat_page.locator("article.message.user")
    expect(question.get_by_role("img", name="image.png")).to_be_visible()
    wait_idle(chat_page)
    message = Message.objects.get(role="user", conversation__owner=owner)
    assert message.content == ""
    assert Attachment.objects.filter(message=message).count() == 1


def test_an_edited_question_keeps_its_files(chat_page: Page, stack: Stack, owner):
    picture = file_make(owner, screenshot_png(), "chart.png")
    conversation = services.conversation_create(owner=owner, title="Chart")
    services.user_message_append(
        conversation=conversation, content="What does it show?", attachments=[str(picture.pk)]
    )
    stack.fake.push(Script(text="Sales going up."))
    chat_page.goto(f"/chat/{conversation.pk}/")
    question = chat_page.locator("article.message.user")
    expect(question.get_by_role("img", name="chart.png")).to_be_visible()
    question.hover()
    question.get_by_role("button", name="Edit").click()
    question.get_by_role("textbox", name="Edit your message").fill("Describe the chart")
    question.get_by_role("button", name="Save & submit").click()
    expect(question.locator(".content")).to_have_text("Describe the chart")
    expect(question.get_by_role("img", name="chart.png")).to_be_visible()
    wait_idle(chat_page)
    edited = Message.objects.get(role="user", content="Describe the chart")
    assert [a.file_id for a in Attachment.objects.filter(message=edited)] == [picture.pk]


def test_screenshots_of_files_in_the_chat(chat_page: Page, stack: Stack, owner, tmp_path: Any):
    """The README's picture of files in the chat. Written to docs/screenshots/ only with
    PARLEY_UPDATE_SCREENSHOTS=1, so ordinary runs leave the repository untouched."""
    target = SCREENSHOTS if os.environ.get("PARLEY_UPDATE_SCREENSHOTS") == "1" else tmp_path
    target.mkdir(parents=True, exist_ok=True)
    picture = file_make(owner, screenshot_png(480, 300), "dashboard.png")
    report = file_make(owner, PDF, "quarterly-report.pdf")
    conversation = services.conversation_create(owner=owner, title="Quarterly numbers")
    services.user_message_append(
        conversation=conversation,
        content="Does the dashboard match the report?",
        attachments=[str(picture.pk), str(report.pk)],
    )
    reply = "Yes: both show revenue up **12%** on the quarter, and the same margin."
    services.messages_append(
        conversation=conversation,
        messages=[services.NewMessage(role="assistant", content=reply)],
    )
    chat_page.set_viewport_size({"width": 1280, "height": 760})
    chat_page.goto(f"/chat/{conversation.pk}/")
    chat_page.get_by_label("Message", exact=True).fill("And the margin by month?")
    attach_with_button(chat_page, payload("notes.csv", b"quarter,margin\nQ1,0.21\n", "text/csv"))
    expect(chips(chat_page)).to_have_attribute("data-state", "done")
    expect(chat_page.get_by_role("img", name="dashboard.png")).to_have_js_property(
        "naturalWidth", 480
    )
    chat_page.screenshot(path=str(target / "attachments.png"))
    assert (target / "attachments.png").stat().st_size > 10_000
