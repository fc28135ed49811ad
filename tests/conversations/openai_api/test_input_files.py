"""Images and files in a user's message at the OpenAI-compatible door, through the
official SDK: `input_image` and `input_file` parts (a file id, or base64 bytes) reach the
model as a stored message's files do, are stored as the user's files and shown back as
parts of the item, or, with `store: false`, reach the model and are kept nowhere. Every
refusal names its part and leaves nothing behind."""

import base64
from typing import Any

import openai
import pytest
from openai.types.conversations import ConversationItem

from conversations import services
from conversations.models import Attachment, Conversation, Message, Run, StoredFile
from tests.support.fake_openai import Script
from tests.support.files import file_make, image_bytes, pdf_bytes, stored_names
from tests.support.openai_api import body_of
from tests.support.sdk_types import assert_sdk_shape

pytestmark = pytest.mark.django_db

PNG = image_bytes("PNG")
PNG_URL = "data:image/png;base64," + base64.b64encode(PNG).decode()
REPORT = pdf_bytes("Quarterly numbers are up by a third.")


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def asking(*parts: dict[str, Any], text: str = "What is this?") -> list[dict[str, Any]]:
    return [{"role": "user", "content": [{"type": "input_text", "text": text}, *parts]}]


def image(**given: Any) -> dict[str, Any]:
    return {"type": "input_image", **given}


def document(**given: Any) -> dict[str, Any]:
    return {"type": "input_file", **given}


def stored_everything() -> tuple[Any, ...]:
    return (
        Conversation.objects.count(),
        Message.objects.count(),
        Run.objects.count(),
        list(StoredFile.objects.values_list("pk", flat=True)),
        Attachment.objects.count(),
        stored_names(),
    )


# --- stored responses: the model reads the files from the store ------------------------


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("worker")
def test_an_uploaded_image_named_by_file_id_reaches_the_model_and_shows_in_the_items(
    client, model, owner
):
    uploaded = client.files.create(file=("cat.png", PNG), purpose="user_data")
    model.push(Script(text="A red square."))
    response = client.responses.create(
        model="m", input=asking(image(file_id=uploaded.id, detail="high"))
    )
    assert response.output_text == "A red square."
    [sent] = [m for m in model.requests[-1].messages if m["role"] == "user"]
    assert sent["content"] == [
        {"type": "image_url", "image_url": {"url": PNG_URL}},
        {"type": "text", "text": "What is this?"},
    ]
    message = Message.objects.get(role="user", conversation__owner=owner)
    assert [a.file.pk.hex for a in message.attachments.all()] == [uploaded.id[5:]]
    raw = client.responses.input_items.with_raw_response.list(response.id).http_response.json()
    [item] = raw["data"]
    assert item["content"] == [
        {"type": "input_text", "text": "What is this?"},
        {"type": "input_image", "image_url": None, "detail": "auto", "file_id": uploaded.id},
    ]
    assert_sdk_shape(ConversationItem, item)


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("worker")
def test_inline_bytes_are_stored_as_the_users_files_and_reach_the_model(client, model, owner):
    model.push(Script(text="Numbers are up."))
    client.responses.create(
        model="m",
        input=asking(
            image(image_url=PNG_URL),
            document(file_data=b64(REPORT), filename="report.pdf"),
            document(file_data="data:text/csv;base64," + b64(b"a,b\n1,2\n"), filename="t.csv"),
            text="Summarise.",
        ),
    )
    [sent] = [m for m in model.requests[-1].messages if m["role"] == "user"]
    image_part, pdf_part, csv_part, text_part = sent["content"]
    assert image_part == {"type": "image_url", "image_url": {"url": PNG_URL}}
    assert pdf_part["text"].startswith("[file: report.pdf, 1 page]\n")
    assert "Quarterly numbers are up by a third." in pdf_part["text"]
    assert csv_part["text"] == "[file: t.csv]\na,b\n1,2\n"
    assert text_part == {"type": "text", "text": "Summarise."}
    files = StoredFile.objects.filter(owner=owner)
    assert sorted(files.values_list("filename", "content_type")) == [
        ("image.png", "image/png"),
        ("report.pdf", "application/pdf"),
        ("t.csv", "text/csv"),
    ]
    message = Message.objects.get(role="user", conversation__owner=owner)
    assert [a.file.filename for a in message.attachments.order_by("position")] == [
        "image.png",
        "report.pdf",
        "t.csv",
    ]


# --- store: false: the model reads them, nothing is kept -------------------------------


def test_store_false_sends_the_files_and_keeps_nothing(client, model, owner):
    kept = file_make(owner, b"# Plan\n\nShip it.\n", "plan.md")
    before = stored_everything()
    model.push(Script(text="Seen."))
    response = client.responses.create(
        model="m",
        store=False,
        input=asking(
            image(image_url=PNG_URL),
            document(file_data="data:application/pdf;base64," + b64(REPORT), filename="r.pdf"),
            document(file_id=f"file-{kept.pk.hex}"),
        ),
    )
    assert response.output_text == "Seen."
    [sent] = [m for m in model.requests[-1].messages if m["role"] == "user"]
    image_part, pdf_part, plan_part, text_part = sent["content"]
    assert image_part == {"type": "image_url", "image_url": {"url": PNG_URL}}
    assert "Quarterly numbers are up by a third." in pdf_part["text"]
    assert plan_part["text"] == "[file: plan.md]\n# Plan\n\nShip it.\n"
    assert text_part["text"] == "What is this?"
    assert stored_everything() == before


def test_store_false_on_a_conversation_reads_its_stored_files_too(client, model, owner):
    conversation = services.conversation_create(owner=owner)
    stored = file_make(owner, PNG, "earlier.png")
    services.user_message_append(
        conversation=conversation, content="Earlier", attachments=[str(stored.pk)]
    )
    model.push(Script(text="Both."))
    client.responses.create(
        model="m", store=False, conversation=str(conversation.pk), input="And now?"
    )
    first = model.requests[-1].messages[0]
    assert first["content"][0] == {"type": "image_url", "image_url": {"url": PNG_URL}}


def test_store_false_on_a_conversation_without_vision_describes_the_image(client, model, owner):
    conversation = services.conversation_create(owner=owner)
    services.conversation_update(conversation=conversation, vision=False)
    model.push(Script(text="Described."))
    client.responses.create(
        model="m",
        store=False,
        conversation=str(conversation.pk),
        input=asking(image(image_url=PNG_URL)),
    )
    [sent] = [m for m in model.requests[-1].messages if m["role"] == "user"]
    assert sent["content"] == "[image: image.png, 4x3]\n\nWhat is this?"


# --- conversation items ------------------------------------------------------------------


def test_items_carry_files_and_list_them_back(client, owner):
    conversation = client.conversations.create(
        items=[{"role": "user", "content": [image(image_url=PNG_URL)]}]
    )
    added = client.conversations.items.create(
        conversation.id,
        items=asking(document(file_data=b64(b"some notes"), filename="notes.txt")),
    )
    [item] = added.data
    file = StoredFile.objects.get(filename="notes.txt")
    assert [part.type for part in item.content] == ["input_text", "input_file"]
    assert item.content[1].file_id == f"file-{file.pk.hex}"
    assert item.content[1].filename == "notes.txt"
    raw = client.conversations.items.with_raw_response.list(conversation.id, order="asc")
    listed = raw.http_response.json()["data"]
    # A message of files alone shows them alone.
    assert [part["type"] for part in listed[0]["content"]] == ["input_image"]
    for shown in listed:
        assert_sdk_shape(ConversationItem, shown)
    again = client.conversations.items.retrieve(item.id, conversation_id=conversation.id)
    assert again == item
    assert Attachment.objects.count() == 2
    # A first message of files alone titles the conversation with its first file's name.
    image_file = Attachment.objects.exclude(file=file).get().file
    assert Conversation.objects.get().title == image_file.filename


# --- refusals: each names its part and nothing is left behind --------------------------


@pytest.mark.parametrize(
    ("part", "status", "code", "param"),
    [
        (image(image_url="https://example.com/cat.png"), 400, "invalid_value", "image_url"),
        (document(file_url="https://example.com/r.pdf"), 400, "invalid_value", "file_url"),
        (
            image(image_url="data:image/png;base64,@@not base64@@"),
            400,
            "invalid_value",
            "image_url",
        ),
        (document(file_data="%%%", filename="x.pdf"), 400, "invalid_value", "file_data"),
        (image(image_url="data:image/png," + "x"), 400, "invalid_value", "image_url"),
        (
            image(image_url="data:image/png;base64," + b64(b"just words")),
            415,
            "unsupported_file_type",
            "image_url",
        ),
        (
            document(file_data=b64(b"<svg xmlns='http://www.w3.org/2000/svg'/>")),
            415,
            "unsupported_file_type",
            "file_data",
        ),
        (
            document(file_data=b64(b"x" * 5000), filename="big.txt"),
            413,
            "file_too_large",
            "file_data",
        ),
        (image(file_id="file-" + "0" * 32), 404, "not_found", "file_id"),
        (image(image_url=PNG_URL, file_id="file-" + "0" * 32), 400, "invalid_value", "image_url"),
        (image(), 400, "missing_required_parameter", "image_url"),
        (image(image_url=PNG_URL, detail="huge"), 400, "invalid_value", "detail"),
        (document(file_data=b64(b"hi"), colour="red"), 400, "unknown_parameter", "colour"),
    ],
    ids=[
        "remote-image",
        "file-url",
        "bad-base64",
        "bad-base64-file",
        "not-base64-url",
        "image-of-text",
        "svg",
        "too-large",
        "unknown-id",
        "two-sources",
        "no-source",
        "detail",
        "unknown-field",
    ],
)
def test_a_refused_part_is_named_and_nothing_is_stored(
    client, settings, django_capture_on_commit_callbacks, part, status, code, param
):
    settings.PARLEY_FILE_MAX_BYTES = 4096
    before = stored_everything()
    # The image before it may have been stored already: its bytes go after the commit.
    with (
        django_capture_on_commit_callbacks(execute=True),
        pytest.raises(openai.APIStatusError) as refused,
    ):
        client.responses.create(model="m", input=asking(image(image_url=PNG_URL), part))
    assert refused.value.status_code == status
    error = body_of(refused.value)
    assert (error["code"], error["param"]) == (code, f"input[0].content[2].{param}")
    assert stored_everything() == before


def test_a_remote_url_is_refused_saying_why(client):
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.create(model="m", input=asking(image(image_url="http://cats.example/")))
    message = body_of(refused.value)["message"]
    assert "fetches nothing from the network" in message
    assert "/openai/v1/files" in message


def test_another_users_file_is_as_unknown_as_none(client, sdk, outsider):
    theirs = file_make(outsider, PNG, "theirs.png")
    before = stored_everything()
    for raw_id in (f"file-{theirs.pk.hex}", str(theirs.pk), "file-" + "1" * 32, "nonsense"):
        with pytest.raises(openai.NotFoundError) as refused:
            client.responses.create(model="m", input=asking(image(file_id=raw_id)))
        assert body_of(refused.value)["param"] == "input[0].content[1].file_id"
        with pytest.raises(openai.NotFoundError):
            client.responses.create(model="m", store=False, input=asking(image(file_id=raw_id)))
    assert stored_everything() == before


def test_a_file_refused_after_another_was_stored_takes_that_one_away(
    client, settings, django_capture_on_commit_callbacks
):
    settings.PARLEY_FILE_QUOTA_BYTES = len(PNG) + 10
    before = stored_everything()
    with (
        django_capture_on_commit_callbacks(execute=True),
        pytest.raises(openai.APIStatusError) as refused,
    ):
        client.responses.create(
            model="m",
            input=asking(image(image_url=PNG_URL), document(file_data=b64(b"y" * 64))),
        )
    assert refused.value.status_code == 413
    assert body_of(refused.value)["code"] == "file_quota_exceeded"
    assert stored_everything() == before


def test_a_message_refused_after_its_files_were_stored_takes_them_away(
    client, owner, django_capture_on_commit_callbacks
):
    conversation = services.conversation_create(owner=owner)
    Run.objects.create(
        conversation=conversation,
        status=Run.Status.IN_PROGRESS,
        branch_id=conversation.active_branch_id,
    )
    kept = file_make(owner, b"already mine", "mine.txt")
    before = stored_everything()
    with (
        django_capture_on_commit_callbacks(execute=True),
        pytest.raises(openai.BadRequestError) as refused,
    ):
        client.conversations.items.create(
            f"conv_{conversation.pk.hex}",
            items=asking(image(image_url=PNG_URL), document(file_data=b64(b"already mine"))),
        )
    assert body_of(refused.value)["code"] == "conversation_locked"
    assert stored_everything() == before
    assert StoredFile.objects.filter(pk=kept.pk).exists()


def test_the_same_file_twice_in_a_message_is_refused(client, owner):
    kept = file_make(owner, PNG, "cat.png")
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.create(
            model="m", input=asking(image(file_id=f"file-{kept.pk.hex}"), image(image_url=PNG_URL))
        )
    assert body_of(refused.value)["param"] == "input[0].content[2].image_url"
    assert StoredFile.objects.count() == 1


def test_files_are_for_a_users_message_and_within_the_per_message_limit(client, settings):
    settings.PARLEY_FILE_MAX_PER_MESSAGE = 2
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.create(
            model="m",
            input=[{"role": "developer", "content": [image(image_url=PNG_URL)]}, *asking()],
        )
    assert body_of(refused.value)["param"] == "input[0].content[0].type"
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.create(model="m", input=asking(*[image(image_url=PNG_URL)] * 3))
    assert body_of(refused.value)["param"] == "input[0].content"
    assert StoredFile.objects.count() == 0


def test_inline_files_may_pass_the_body_limit_but_the_rest_may_not(client, model, settings):
    settings.PARLEY_API_MAX_BODY_BYTES = 2000
    big = b"A long line of notes.\n" * 200
    assert len(b64(big)) > 2000
    model.push(Script(text="Read."))
    response = client.responses.create(
        model="m", store=False, input=asking(document(file_data=b64(big), filename="l.txt"))
    )
    assert response.output_text == "Read."
    with pytest.raises(openai.APIStatusError) as refused:
        client.responses.create(model="m", store=False, input="words " * 500)
    assert refused.value.status_code == 413
