"""Files in messages: `attachments` on send and edit, checked (the sender's own files,
distinct, within the per-message limit) with nothing stored on refusal, and carried by
every message payload in order."""

import uuid
from typing import Any

import pytest
from rest_framework.test import APIClient

from conversations import services
from conversations.models import Attachment, Conversation, Message, Run, StoredFile
from conversations.services.message_batches import message_replace
from tests.support.api import error_of
from tests.support.files import file_make

pytestmark = pytest.mark.django_db


def send(api: APIClient, conversation: Conversation, body: dict[str, Any]) -> Any:
    return api.post(f"/api/v1/conversations/{conversation.pk}/messages/", body, format="json")


def page(api: APIClient, conversation: Conversation) -> list[dict[str, Any]]:
    response = api.get(f"/api/v1/conversations/{conversation.pk}/messages/?limit=200")
    assert response.status_code == 200
    return response.json()["results"]


def stored(conversation: Conversation) -> tuple[int, int, int]:
    return (
        Message.objects.filter(conversation=conversation).count(),
        Run.objects.filter(conversation=conversation).count(),
        Attachment.objects.filter(conversation=conversation).count(),
    )


def shown(file: StoredFile) -> dict[str, Any]:
    return {
        "id": str(file.id),
        "filename": file.filename,
        "content_type": file.content_type,
        "size": file.size,
    }


def test_a_message_carries_its_files_in_order_everywhere(api, owner, conversation):
    first = file_make(owner, b"first file", "one.txt")
    second = file_make(owner, b"a,b\n1,2\n", "two.csv")
    response = send(
        api, conversation, {"content": "See", "attachments": [str(second.id), str(first.id)]}
    )
    assert response.status_code == 202, response.content
    assert response.json()["message"]["attachments"] == [shown(second), shown(first)]
    assert page(api, conversation)[0]["attachments"] == [shown(second), shown(first)]


def test_a_message_without_files_lists_none(api, conversation):
    assert send(api, conversation, {"content": "Hi"}).json()["message"]["attachments"] == []
    assert page(api, conversation)[0]["attachments"] == []


def test_files_alone_make_a_message_and_name_the_conversation(api, owner):
    conversation = services.conversation_create(owner=owner)
    file = file_make(owner, b"notes", "notes.txt")
    response = send(api, conversation, {"content": "", "attachments": [str(file.id)]})
    assert response.status_code == 202, response.content
    assert response.json()["message"]["content"] == ""
    conversation.refresh_from_db()
    assert conversation.title == "notes.txt"
    Run.objects.filter(conversation=conversation).update(status=Run.Status.COMPLETED)
    no_files = send(api, conversation, {"content": "  ", "attachments": []})
    assert no_files.status_code == 400
    assert error_of(no_files)["details"]["problems"][0]["path"] == "$.content"


@pytest.mark.parametrize("which", ["outsider", "unknown", "malformed"])
def test_a_file_not_the_senders_is_404_and_nothing_is_stored(
    api, owner, outsider, conversation, which
):
    mine = file_make(owner, b"mine", "mine.txt")
    theirs = file_make(outsider, b"theirs", "theirs.txt")
    other = {"outsider": str(theirs.id), "unknown": str(uuid.uuid4()), "malformed": "nope"}[which]
    response = send(api, conversation, {"content": "x", "attachments": [str(mine.id), other]})
    assert response.status_code == 404
    error = error_of(response)
    assert error["code"] == "not_found"
    assert str(theirs.id) not in response.content.decode()
    assert stored(conversation) == (0, 0, 0)


def test_more_files_than_the_limit_are_refused_naming_it(api, owner, conversation, settings):
    settings.PARLEY_FILE_MAX_PER_MESSAGE = 2
    files = [str(file_make(owner, f"f{i}".encode(), f"{i}.txt").id) for i in range(3)]
    response = send(api, conversation, {"content": "x", "attachments": files})
    assert response.status_code == 400
    problem = error_of(response)["details"]["problems"][0]
    assert problem["path"] == "$.attachments"
    assert "at most 2" in problem["message"]
    assert stored(conversation) == (0, 0, 0)
    assert send(api, conversation, {"content": "x", "attachments": files[:2]}).status_code == 202


def test_a_file_twice_in_one_message_is_refused(api, owner, conversation):
    file = str(file_make(owner).id)
    other = str(file_make(owner, b"other", "b.txt").id)
    response = send(api, conversation, {"content": "x", "attachments": [file, other, file]})
    assert response.status_code == 400
    assert error_of(response)["details"]["problems"][0]["path"] == "$.attachments[2]"
    assert stored(conversation) == (0, 0, 0)


@pytest.mark.parametrize("attachments", ["abc", [5], {"a": 1}])
def test_attachments_of_the_wrong_shape_are_400(api, conversation, attachments):
    response = send(api, conversation, {"content": "x", "attachments": attachments})
    assert response.status_code == 400
    assert error_of(response)["details"]["problems"][0]["path"].startswith("$.attachments")
    assert stored(conversation) == (0, 0, 0)


def test_an_edit_carries_its_own_files(api, owner, conversation):
    before = file_make(owner, b"before", "before.txt")
    after = file_make(owner, b"after", "after.txt")
    sent = send(api, conversation, {"content": "v1", "attachments": [str(before.id)]}).json()
    Run.objects.filter(conversation=conversation).update(status=Run.Status.COMPLETED)
    key = sent["message"]["id"]
    response = api.post(
        f"/api/v1/conversations/{conversation.pk}/messages/{key}/edit/",
        {"content": "", "attachments": [str(after.id)]},
        format="json",
    )
    assert response.status_code == 202, response.content
    assert response.json()["message"]["attachments"] == [shown(after)]
    assert [row["attachments"] for row in page(api, conversation)] == [[shown(after)]]


def test_an_edit_with_another_users_file_is_404_and_stores_nothing(
    api, owner, outsider, conversation
):
    sent = send(api, conversation, {"content": "v1"}).json()
    Run.objects.filter(conversation=conversation).update(status=Run.Status.COMPLETED)
    before = stored(conversation)
    theirs = file_make(outsider, b"theirs", "theirs.txt")
    response = api.post(
        f"/api/v1/conversations/{conversation.pk}/messages/{sent['message']['id']}/edit/",
        {"content": "v2", "attachments": [str(theirs.id)]},
        format="json",
    )
    assert response.status_code == 404
    assert stored(conversation) == before
    conversation.refresh_from_db()
    assert conversation.branch_count == 1


def test_ten_files_per_message_add_at_most_two_queries_to_a_page(
    api, owner, conversation, django_assert_max_num_queries
):
    files = [file_make(owner, f"file {i}".encode(), f"{i}.txt") for i in range(10)]
    for index in range(20):
        services.user_message_append(
            conversation=conversation,
            content=f"m{index}",
            attachments=[str(file.id) for file in files],
        )
    # The page's budget without files (test_conversations.py) plus two.
    with django_assert_max_num_queries(7):
        rows = page(api, conversation)
    assert len(rows) == 20
    assert all(row["attachments"] == [shown(file) for file in files] for row in rows)


def test_deleting_the_conversation_deletes_its_attachments_and_frees_the_file(
    api, owner, conversation
):
    file = file_make(owner)
    send(api, conversation, {"content": "x", "attachments": [str(file.id)]})
    assert api.delete(f"/api/v1/files/{file.id}/").status_code == 409
    Run.objects.filter(conversation=conversation).update(status=Run.Status.COMPLETED)
    assert api.delete(f"/api/v1/conversations/{conversation.pk}/").status_code == 204
    assert not Attachment.objects.filter(file=file).exists()
    # Nothing uses it any more: the sweep may take it, and so may its owner.
    assert api.delete(f"/api/v1/files/{file.id}/").status_code == 204


def test_a_fork_keeps_the_files_of_the_messages_it_copies(api, owner, conversation):
    picture = file_make(owner, b"a picture, say", "one.txt")
    notes = file_make(owner, b"a,b\n1,2\n", "two.csv")
    send(api, conversation, {"content": "See", "attachments": [str(notes.id), str(picture.id)]})

    response = api.post(f"/api/v1/conversations/{conversation.pk}/fork/", {"at_seq": 1})

    assert response.status_code == 201, response.content
    fork = Conversation.objects.get(pk=response.json()["id"])
    assert page(api, fork)[0]["attachments"] == [shown(notes), shown(picture)]
    # Still in use by the fork once the original is gone.
    api.delete(f"/api/v1/conversations/{conversation.pk}/")
    assert api.delete(f"/api/v1/files/{notes.id}/").status_code == 409


def test_a_replaced_message_keeps_the_files_of_the_messages_after_it(owner, conversation):
    first = services.user_message_append(conversation=conversation, content="First")
    picture = file_make(owner, b"a picture, say", "one.txt")
    api = APIClient()
    api.force_authenticate(owner)
    send(api, conversation, {"content": "Then this", "attachments": [str(picture.id)]})
    Run.objects.filter(conversation=conversation).update(status="completed")  # no worker here

    message_replace(conversation=conversation, message=first, replacement=None)

    (left,) = page(api, conversation)
    assert (left["content"], left["attachments"]) == ("Then this", [shown(picture)])
