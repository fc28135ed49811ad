"""How a conversation is organised travels with its export: version 2 carries its tags (by
name, in order whatever their case), its pin and its folder (by name); an import files it
among the importer's own tags and folders, made when missing, within their limits, and
refuses anything malformed with nothing stored, tags and folders included."""

import io
import json
import zipfile
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from accounts.models import User
from conversations import services
from conversations.errors import ValidationFailed
from conversations.formats import archives, exporting
from conversations.models import Conversation, ConversationTag, Folder, Tag
from conversations.services.organising_names import folder_ensure, tags_ensure
from tests.support.api import error_of
from tests.support.conversations import refetch, row_counts
from tests.support.documents import export_comparable

pytestmark = pytest.mark.django_db


def organised(owner: User, *, tags: list[str], folder: str | None, pinned: bool) -> Conversation:
    conversation = services.conversation_create(owner=owner, title="Plans")
    services.user_message_append(conversation=conversation, content="Where to?")
    ConversationTag.objects.bulk_create(
        ConversationTag(conversation=conversation, tag=tag)
        for tag in tags_ensure(owner=owner, names=tags)
    )
    Conversation.objects.filter(pk=conversation.pk).update(
        pinned=pinned, folder=folder_ensure(owner=owner, name=folder) if folder else None
    )
    return refetch(conversation)


def document_of(conversation: Conversation, **conversation_fields: Any) -> str:
    document = exporting.export_json(refetch(conversation))
    document["conversation"].update(conversation_fields)
    return json.dumps(document)


def organising_rows() -> tuple[int, int, int]:
    return Tag.objects.count(), Folder.objects.count(), ConversationTag.objects.count()


def test_version_2_carries_tags_sorted_whatever_their_case_the_pin_and_the_folder(owner):
    conversation = organised(owner, tags=["travel", "Budget", "alps"], folder="Trips", pinned=True)

    carried = exporting.export_json(conversation)["conversation"]

    assert carried["tags"] == ["alps", "Budget", "travel"]
    assert carried["pinned"] is True
    assert carried["folder"] == "Trips"


def test_an_unorganised_conversation_carries_the_empty_values(owner):
    conversation = services.conversation_create(owner=owner, title="Loose")

    carried = exporting.export_json(conversation)["conversation"]

    assert (carried["tags"], carried["pinned"], carried["folder"]) == ([], False, None)


def test_version_1_leaves_them_out(owner):
    conversation = organised(owner, tags=["travel"], folder="Trips", pinned=True)

    carried = exporting.export_json(conversation, version=1)["conversation"]

    assert not {"tags", "pinned", "folder"} & set(carried)


def test_a_version_1_document_imports_unorganised(owner):
    source = organised(owner, tags=["travel"], folder="Trips", pinned=True)
    before = organising_rows()

    imported = services.conversation_import(
        owner=owner, document=json.dumps(exporting.export_json(source, version=1))
    )

    imported = refetch(imported)
    assert (imported.pinned, imported.folder_id, imported.tags.count()) == (False, None, 0)
    assert organising_rows() == before


def test_another_user_gets_the_names_as_their_own_new_tags_and_folder(owner, outsider):
    source = organised(owner, tags=["travel", "Budget"], folder="Trips", pinned=True)
    folder_ensure(owner=outsider, name="Existing")

    imported = refetch(services.conversation_import(owner=outsider, document=document_of(source)))

    assert imported.pinned is True
    assert imported.folder is not None
    assert (imported.folder.owner, imported.folder.name) == (outsider, "Trips")
    # A new folder goes last in the importer's order.
    assert imported.folder.position == 1
    assert sorted(tag.name for tag in imported.tags.all()) == ["Budget", "travel"]
    assert {tag.owner_id for tag in imported.tags.all()} == {outsider.pk}
    # The source's tags and folder are the owner's alone, untouched.
    assert Tag.objects.filter(owner=owner).count() == 2


def test_existing_tags_and_folders_are_reused_whatever_their_case(owner, outsider):
    source = organised(owner, tags=["TRAVEL", "new one"], folder="TRIPS", pinned=False)
    [travel] = tags_ensure(owner=outsider, names=["travel"])
    trips = folder_ensure(owner=outsider, name="Trips")

    imported = refetch(services.conversation_import(owner=outsider, document=document_of(source)))

    assert imported.folder_id == trips.pk
    assert Folder.objects.filter(owner=outsider).count() == 1
    assert travel in imported.tags.all()
    # The importer's own spelling stays.
    assert sorted(tag.name for tag in imported.tags.all()) == ["new one", "travel"]
    assert Tag.objects.filter(owner=outsider).count() == 2


def test_export_import_export_is_identical_for_another_user_and_the_same(owner, outsider):
    source = organised(owner, tags=["b", "A", "c d"], folder="Work", pinned=True)
    first = exporting.export_json(source)

    for importer in (outsider, owner):
        imported = services.conversation_import(owner=importer, document=json.dumps(first))
        second = exporting.export_json(refetch(imported))
        assert export_comparable(second) == export_comparable(first)
    # Importing into the same account made no second tag or folder.
    assert Tag.objects.filter(owner=owner).count() == 3
    assert Folder.objects.filter(owner=owner).count() == 1


def test_a_document_with_duplicate_names_tags_once(owner):
    source = organised(owner, tags=[], folder=None, pinned=False)

    imported = services.conversation_import(
        owner=owner, document=document_of(source, tags=["Red", "red ", " RED", "blue"])
    )

    assert sorted(tag.name for tag in refetch(imported).tags.all()) == ["Red", "blue"]


BAD_VALUES = [
    pytest.param({"tags": "travel"}, {"$.conversation.tags"}, id="tags-not-a-list"),
    pytest.param({"tags": ["ok", 7]}, {"$.conversation.tags[1]"}, id="tag-not-a-string"),
    pytest.param({"tags": ["ok", "  "]}, {"$.conversation.tags[1]"}, id="tag-blank"),
    pytest.param({"tags": ["t" * 65]}, {"$.conversation.tags[0]"}, id="tag-too-long"),
    pytest.param({"tags": ["a\nb"]}, {"$.conversation.tags[0]"}, id="tag-control-character"),
    pytest.param({"tags": None}, {"$.conversation.tags"}, id="tags-null"),
    pytest.param({"pinned": "yes"}, {"$.conversation.pinned"}, id="pinned-a-string"),
    pytest.param({"pinned": 1}, {"$.conversation.pinned"}, id="pinned-a-number"),
    pytest.param({"folder": 3}, {"$.conversation.folder"}, id="folder-a-number"),
    pytest.param({"folder": ["Trips"]}, {"$.conversation.folder"}, id="folder-a-list"),
    pytest.param({"folder": ""}, {"$.conversation.folder"}, id="folder-empty"),
    pytest.param({"folder": "f" * 101}, {"$.conversation.folder"}, id="folder-too-long"),
    pytest.param(
        {"tags": ["a\x00"], "folder": "x\x07"},
        {"$.conversation.tags[0]", "$.conversation.folder"},
        id="both-wrong",
    ),
]


@pytest.mark.parametrize(("fields", "paths"), BAD_VALUES)
def test_malformed_organising_is_refused_with_nothing_stored(owner, fields, paths):
    source = organised(owner, tags=["kept"], folder="Kept", pinned=False)
    document = document_of(source, **fields)
    before = (row_counts(), organising_rows())

    with pytest.raises(ValidationFailed) as refused:
        services.conversation_import(owner=owner, document=document)

    assert {problem.path for problem in refused.value.problems} == paths
    assert (row_counts(), organising_rows()) == before


def test_tags_per_conversation_are_limited(owner, settings):
    settings.PARLEY_MAX_TAGS_PER_CONVERSATION = 2
    source = organised(owner, tags=[], folder=None, pinned=False)
    before = (row_counts(), organising_rows())

    with pytest.raises(ValidationFailed) as refused:
        services.conversation_import(
            owner=owner, document=document_of(source, tags=["a", "b", "c"])
        )

    [problem] = refused.value.problems
    assert (problem.path, problem.message) == ("$.conversation.tags", "has 3 tags; the limit is 2")
    assert (row_counts(), organising_rows()) == before
    imported = services.conversation_import(
        owner=owner, document=document_of(source, tags=["a", "b"])
    )
    assert refetch(imported).tags.count() == 2


def test_the_importers_tag_limit_counts_only_new_names(owner, outsider, settings):
    settings.PARLEY_MAX_TAGS = 3
    # Tags on a conversation count (unused ones would make room).
    services.conversation_update(
        conversation=services.conversation_create(owner=outsider), tags=["one", "two"]
    )
    source = organised(owner, tags=["ONE", "three", "four"], folder=None, pinned=False)
    before = (row_counts(), organising_rows())

    with pytest.raises(ValidationFailed) as refused:
        services.conversation_import(owner=outsider, document=document_of(source))

    assert [problem.path for problem in refused.value.problems] == ["$.conversation.tags"]
    assert (row_counts(), organising_rows()) == before
    # One new name fits.
    services.conversation_import(
        owner=outsider, document=document_of(source, tags=["one", "three"])
    )
    assert Tag.objects.filter(owner=outsider).count() == 3


def test_the_importers_folder_limit_refuses_a_new_folder_not_an_existing_one(
    owner, outsider, settings
):
    settings.PARLEY_MAX_FOLDERS = 1
    folder_ensure(owner=outsider, name="Trips")
    source = organised(owner, tags=[], folder="Work", pinned=False)
    before = (row_counts(), organising_rows())

    with pytest.raises(ValidationFailed) as refused:
        services.conversation_import(owner=outsider, document=document_of(source))

    assert [problem.path for problem in refused.value.problems] == ["$.conversation.folder"]
    assert (row_counts(), organising_rows()) == before
    imported = services.conversation_import(
        owner=outsider, document=document_of(source, folder="trips")
    )
    assert refetch(imported).folder == Folder.objects.get(owner=outsider)


def test_a_failure_after_the_messages_leaves_no_tag_or_folder(owner, outsider, monkeypatch):
    """Tags and folders are made in the import's last transaction: one that fails there
    takes them along with the conversation."""
    from conversations.services import imports

    source = organised(owner, tags=["fresh"], folder="Fresh", pinned=True)
    before = (row_counts(), organising_rows())

    def failing(**kwargs: Any) -> None:
        raise RuntimeError("the database went away")

    monkeypatch.setattr(imports, "audit_record", failing)
    with pytest.raises(RuntimeError):
        services.conversation_import(owner=outsider, document=document_of(source))

    assert (row_counts(), organising_rows()) == before


def _zip_documents(body: bytes) -> list[dict[str, Any]]:
    with zipfile.ZipFile(io.BytesIO(body)) as archive:
        return [json.loads(archive.read(name)) for name in archive.namelist()]


def _bulk_queries(owner: User, count: int, **organising: Any) -> tuple[int, bytes]:
    Conversation.objects.filter(owner=owner).delete()
    for index in range(count):
        organised(owner, tags=[f"t{index}", "common"], folder=f"F{index % 2}", **organising)
    queryset = Conversation.objects.filter(owner=owner)
    with CaptureQueriesContext(connection) as queries:
        body = b"".join(archives.json_zip_stream(queryset))
    return len(queries), body


def test_the_bulk_json_export_reads_tags_and_folders_per_page_not_per_conversation(owner):
    plain = Conversation.objects.filter(owner=owner)
    few, _ = _bulk_queries(owner, 2, pinned=True)
    many, body = _bulk_queries(owner, 8, pinned=True)
    per_conversation = (many - few) / 6
    # What every conversation costs anyway (its branches, its messages, its files),
    # measured without tags or folders: organising adds nothing per conversation.
    Conversation.objects.filter(owner=owner).delete()
    for _ in range(2):
        services.user_message_append(
            conversation=services.conversation_create(owner=owner, title="x"), content="hi"
        )
    with CaptureQueriesContext(connection) as bare_few:
        b"".join(archives.json_zip_stream(plain))
    for _ in range(6):
        services.user_message_append(
            conversation=services.conversation_create(owner=owner, title="x"), content="hi"
        )
    with CaptureQueriesContext(connection) as bare_many:
        b"".join(archives.json_zip_stream(plain))
    assert per_conversation == (len(bare_many) - len(bare_few)) / 6
    documents = _zip_documents(body)
    assert len(documents) == 8
    assert all(doc["conversation"]["pinned"] for doc in documents)
    assert {doc["conversation"]["folder"] for doc in documents} == {"F0", "F1"}
    assert all("common" in doc["conversation"]["tags"] for doc in documents)


# --- through the API ---------------------------------------------------------------------


def _downloaded(client: Any, conversation: Conversation) -> Any:
    return client.get(f"/api/v1/conversations/{conversation.pk}/export/?format=json")


def test_the_api_export_carries_it_and_the_api_import_restores_it(as_user, owner, outsider):
    source = organised(owner, tags=["travel"], folder="Trips", pinned=True)
    response = _downloaded(as_user(owner), source)
    body = b"".join(response.streaming_content)
    assert json.loads(body)["conversation"]["tags"] == ["travel"]
    # Another user's conversation is not theirs to export.
    assert _downloaded(as_user(outsider), source).status_code == 404

    imported = as_user(outsider).post(
        "/api/v1/conversations/import/", body, content_type="application/json"
    )

    assert imported.status_code == 201, imported.content
    stored = Conversation.objects.get(pk=imported.json()["id"])
    assert stored.folder is not None
    assert (stored.owner, stored.pinned, stored.folder.name) == (outsider, True, "Trips")
    assert [tag.name for tag in stored.tags.all()] == ["travel"]


def test_the_api_refuses_malformed_organising_with_a_400_and_stores_nothing(as_user, owner):
    source = organised(owner, tags=[], folder=None, pinned=False)
    before = (row_counts(), organising_rows())

    response = as_user(owner).post(
        "/api/v1/conversations/import/",
        document_of(source, tags=[1], pinned="no", folder="New"),
        content_type="application/json",
    )

    assert response.status_code == 400
    error = error_of(response)
    assert error["code"] == "invalid"
    assert {problem["path"] for problem in error["details"]["problems"]} == {
        "$.conversation.tags[0]",
        "$.conversation.pinned",
    }
    assert (row_counts(), organising_rows()) == before
