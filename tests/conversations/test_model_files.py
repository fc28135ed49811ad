"""Files in the model's input: images as image parts (or named in words for a model that
reads text only), text files and PDFs as their text, cut to the budget with the cut said,
each file read once per call."""

import base64
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from conversations import context, engine, selectors, services
from conversations.context import FileInput, HistoryMessage, build_model_input
from conversations.models import Conversation, FileText, StoredFile
from tests.support.fake_openai import Script
from tests.support.files import PDF, file_make, image_bytes, pdf_bytes
from tests.support.steps import run_to_end

PNG = image_bytes("PNG", (4, 3))


def user_input(model_input: list[dict[str, Any]]) -> Any:
    return [m for m in model_input if m["role"] == "user"][-1]["content"]


def opened_noted(storage: Any, opened: list[str]) -> Any:
    """The storage's `open`, noting each name it opens in `opened`."""
    real_open = storage.open

    def note(name: str, *args: Any) -> Any:
        opened.append(name)
        return real_open(name, *args)

    return note


def send(conversation: Conversation, content: str, *files: StoredFile) -> None:
    services.user_message_append(
        conversation=conversation, content=content, attachments=[str(f.pk) for f in files]
    )


# --- the shapes, from stored state alone ----------------------------------------------


def test_a_message_without_images_stays_plain_text_with_its_files_before_it():
    message = HistoryMessage(
        role="user",
        content="Summarise these.",
        files=(
            FileInput("notes.md", "text/markdown", text="# Notes\nBuy milk."),
            FileInput("photo.png", "image/png", width=640, height=480),
        ),
    )

    assert context.chat_message(message) == {
        "role": "user",
        "content": "[file: notes.md]\n# Notes\nBuy milk.\n\n"
        "[image: photo.png, 640x480]\n\nSummarise these.",
    }


def test_an_image_the_model_takes_goes_as_an_image_part():
    url = "data:image/png;base64,AAAA"
    message = HistoryMessage(
        role="user",
        content="What is this?",
        files=(FileInput("a.png", "image/png", width=4, height=3, image_url=url),),
    )

    assert context.chat_message(message)["content"] == [
        {"type": "image_url", "image_url": {"url": url}},
        {"type": "text", "text": "What is this?"},
    ]
    # An image costs a fixed share of the budget, whatever its bytes.
    assert context.estimate_tokens(context.chat_message(message)) == (
        context.MESSAGE_OVERHEAD_TOKENS + context.IMAGE_TOKENS + 4
    )


@pytest.mark.parametrize(
    ("file", "said"),
    [
        (FileInput("r.pdf", "application/pdf", pages=2, text="Page one"), "[file: r.pdf, 2 pages]"),
        (FileInput("r.pdf", "application/pdf", pages=1, text=" "), "no text"),
        (FileInput("r.pdf", "application/pdf", text=None), "could not be read"),
        (FileInput("gone.txt", "text/plain", text=None), "could not be read"),
    ],
    ids=["pdf-pages", "pdf-scanned", "pdf-unreadable", "bytes-missing"],
)
def test_what_a_file_holds_is_said(file, said):
    content = context.chat_message(HistoryMessage(role="user", content="", files=(file,)))
    assert said in content["content"]


def test_files_text_shares_half_the_budget_and_the_cut_is_said():
    long = "x" * 10_000
    files = (FileInput("a.txt", "text/plain", text=long), FileInput("b.csv", "text/csv", text=long))
    budget = 2_000  # half: 4,000 characters, 2,000 a file
    model_input = build_model_input(
        system_prompt="",
        history=[HistoryMessage(role="user", content="Compare", files=files)],
        draft="",
        token_budget=budget,
    )

    content = model_input[0]["content"]
    assert content.count("x" * 2_000) == 2
    assert "x" * 2_001 not in content
    assert "[cut: only the first 2000 characters of a.txt fit]" in content
    assert "[cut: only the first 2000 characters of b.csv fit]" in content
    assert content.endswith("Compare")


def test_text_known_to_go_on_is_said_cut_even_when_it_fits():
    file = FileInput("long.pdf", "application/pdf", pages=900, text="start", complete=False)
    content = context.chat_message(HistoryMessage(role="user", content="", files=(file,)))
    assert "[cut: only the first 5 characters of long.pdf fit]" in content["content"]


# --- read from storage for a stored conversation --------------------------------------


@pytest.mark.django_db
def test_the_model_gets_the_image_the_pdf_text_and_the_text_file(owner, conversation):
    image = file_make(owner, PNG, "screen.png")
    report = file_make(owner, pdf_bytes("Revenue grew 12 percent.", "Costs fell."), "q3.pdf")
    notes = file_make(owner, "naïve notes".encode(), "notes.txt")
    send(conversation, "What changed?", image, report, notes)

    content = user_input(selectors.conversation_model_input(conversation=conversation))

    assert content[0]["type"] == "image_url"
    url = content[0]["image_url"]["url"]
    assert url.startswith("data:image/png;base64,")
    assert base64.b64decode(url.split(",", 1)[1]) == PNG
    assert content[1]["text"].startswith("[file: q3.pdf, 2 pages]\nRevenue grew 12 percent.")
    assert "Costs fell." in content[1]["text"]
    assert content[2]["text"] == "[file: notes.txt]\nnaïve notes"
    assert content[3] == {"type": "text", "text": "What changed?"}


@pytest.mark.django_db
def test_a_model_that_reads_text_only_is_told_of_the_image_which_is_not_read(
    owner, conversation, monkeypatch
):
    image = file_make(owner, PNG, "screen.png")
    send(conversation, "Look", image)
    services.conversation_update(conversation=conversation, vision=False)
    opened: list[str] = []
    storage = services.files_storage()
    monkeypatch.setattr(storage, "open", opened_noted(storage, opened))

    content = user_input(selectors.conversation_model_input(conversation=conversation))

    assert content == "[image: screen.png, 4x3]\n\nLook"
    assert opened == []


@pytest.mark.django_db
def test_each_file_is_read_once_per_call_however_many_messages_carry_it(
    owner, conversation, monkeypatch, settings
):
    settings.PARLEY_CONTEXT_TOKENS = 100_000  # room for them all
    images = [file_make(owner, image_bytes("PNG", (n + 1, 1)), f"{n}.png") for n in range(20)]
    for image in images:
        send(conversation, "and this", *dict.fromkeys([image, images[0]]))
    opened: list[str] = []
    storage = services.files_storage()
    monkeypatch.setattr(storage, "open", opened_noted(storage, opened))

    model_input = selectors.conversation_model_input(conversation=conversation)

    sent = [
        part["image_url"]["url"]
        for message in model_input
        if isinstance(message["content"], list)
        for part in message["content"]
        if part["type"] == "image_url"
    ]
    assert len(sent) == 39  # the first image rides along with every message
    assert sorted(opened) == sorted(image.storage_name for image in images)


@pytest.mark.django_db
def test_the_files_of_messages_the_call_leaves_out_are_not_read(
    owner, conversation, monkeypatch, settings
):
    settings.PARLEY_CONTEXT_TOKENS = 3 * context.IMAGE_TOKENS  # room for two images and text
    images = [file_make(owner, image_bytes("PNG", (n + 1, 1)), f"{n}.png") for n in range(6)]
    for image in images:
        send(conversation, "next", image)
    opened: list[str] = []
    storage = services.files_storage()
    monkeypatch.setattr(storage, "open", opened_noted(storage, opened))

    model_input = selectors.conversation_model_input(conversation=conversation)

    assert len(model_input) == 2
    assert opened == [image.storage_name for image in images[-2:]]


@pytest.mark.django_db
def test_files_cost_one_query_and_a_history_without_any_costs_none(owner, conversation):
    send(conversation, "plain")
    with CaptureQueriesContext(connection) as plain:
        selectors.conversation_model_input(conversation=conversation)
    text = file_make(owner, b"some text", "a.txt")
    send(conversation, "with a file", text)
    with CaptureQueriesContext(connection) as with_files:
        selectors.conversation_model_input(conversation=conversation)

    assert len(with_files) == len(plain) + 1


@pytest.mark.django_db
def test_a_large_text_file_is_read_only_as_far_as_the_model_can_be_sent(
    owner, conversation, settings, monkeypatch
):
    settings.PARLEY_CONTEXT_TOKENS = 1_000  # half: 2,000 characters
    big = file_make(owner, b"y" * 500_000, "big.txt")
    send(conversation, "Read it", big)
    asked: list[int] = []
    storage = services.files_storage()
    real_open = storage.open

    class Spy:
        def __init__(self, stream: Any) -> None:
            self.stream = stream

        def __enter__(self) -> "Spy":
            return self

        def __exit__(self, *exc: object) -> None:
            self.stream.close()

        def read(self, size: int = -1) -> bytes:
            asked.append(size)
            return self.stream.read(size)

    monkeypatch.setattr(storage, "open", lambda name, *args: Spy(real_open(name, *args)))

    content = user_input(selectors.conversation_model_input(conversation=conversation))

    assert "y" * 2_000 in content
    assert "y" * 2_001 not in content
    assert "[cut: only the first 2000 characters of big.txt fit]" in content
    assert asked
    assert max(asked) <= 2_000 * 4


@pytest.mark.django_db
def test_bytes_gone_from_storage_are_said_and_the_turn_goes_on(owner, conversation):
    text = file_make(owner, b"lost words", "lost.txt")
    send(conversation, "Still there?", text)
    services.files_storage().delete(text.storage_name)

    content = user_input(selectors.conversation_model_input(conversation=conversation))

    assert content == "[file: lost.txt]\n[its text could not be read]\n\nStill there?"


# --- a PDF's text is taken once, at upload --------------------------------------------


@pytest.mark.django_db
def test_a_pdf_upload_keeps_its_page_count_and_text(owner):
    stored = file_make(owner, pdf_bytes("Alpha", "Beta", "Gamma"), "abc.pdf")

    assert stored.page_count == 3
    text = FileText.objects.get(file=stored)
    assert text.complete
    assert text.text.split() == ["Alpha", "Beta", "Gamma"]


@pytest.mark.django_db
def test_a_pdf_longer_than_the_text_limit_is_kept_cut(owner, settings):
    settings.PARLEY_FILE_TEXT_MAX_CHARS = 30
    stored = file_make(owner, pdf_bytes("A" * 20, "B" * 20, "C" * 20), "long.pdf")

    text = FileText.objects.get(file=stored)
    assert (len(text.text), text.complete) == (30, False)
    assert stored.page_count == 3


@pytest.mark.django_db
def test_a_pdf_that_cannot_be_read_is_stored_with_its_text_unknown(owner):
    stored = file_make(owner, PDF, "broken.pdf")  # a signature and little else

    assert stored.content_type == "application/pdf"
    assert not FileText.objects.filter(file=stored).exists()


# --- through a run, to the upstream ---------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_a_run_sends_the_upstream_the_image_part_and_the_pdf_text(
    owner, redis_url, enqueued, upstream
):
    conversation = services.conversation_create(owner=owner, title="Files")
    image = file_make(owner, PNG, "screen.png")
    report = file_make(owner, pdf_bytes("Revenue grew 12 percent."), "q3.pdf")
    upstream.push(Script(text="Revenue grew."))

    _, run = engine.run_start(
        conversation=conversation,
        content="What does it say?",
        attachments=[str(image.pk), str(report.pk)],
    )
    assert run_to_end(run, enqueued).status == "completed"

    sent = upstream.requests[0].messages[-1]
    assert sent["role"] == "user"
    assert sent["content"][0]["image_url"]["url"] == (
        "data:image/png;base64," + base64.b64encode(PNG).decode()
    )
    assert sent["content"][1] == {
        "type": "text",
        "text": "[file: q3.pdf, 1 page]\nRevenue grew 12 percent.",
    }
    assert sent["content"][2] == {"type": "text", "text": "What does it say?"}
