"""Files in the admin: listed on the transcript, opened through an audited download served
with the API's safe headers, refused without the transcript permission or outside the
conversation; storage per user on the usage page."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from accounts.models import User
from conversations import services
from conversations.models import AuditEvent, Conversation, StoredFile
from tests.support.admin import client_for
from tests.support.files import PDF, file_make, image_bytes

pytestmark = pytest.mark.django_db

PNG = image_bytes("PNG", (40, 30))
NOTE = b"Remember the eggs."


def file_url(conversation: Conversation, file: StoredFile | str) -> str:
    key = file.pk if isinstance(file, StoredFile) else file
    return reverse("admin:conversations_conversation_file", args=[conversation.pk, key])


def transcript_url(conversation: Conversation) -> str:
    return reverse("admin:conversations_conversation_transcript", args=[conversation.pk])


def with_files(owner: User, *files: StoredFile, title: str = "Pictures") -> Conversation:
    conversation = services.conversation_create(owner=owner, title=title)
    services.user_message_append(
        conversation=conversation,
        content="Look at these.",
        attachments=[str(file.pk) for file in files],
    )
    services.user_message_append(conversation=conversation, content="No files here.")
    return conversation


@pytest.fixture
def picture(owner) -> StoredFile:
    return file_make(owner, PNG, "holiday.png")


@pytest.fixture
def note(owner) -> StoredFile:
    return file_make(owner, NOTE, "shopping.txt")


@pytest.fixture
def pictures(owner, picture, note) -> Conversation:
    return with_files(owner, picture, note)


def body_of(response) -> bytes:
    return b"".join(response.streaming_content) if response.streaming else response.content


# --- the transcript ---------------------------------------------------------------------


def test_the_transcript_lists_each_messages_files_with_type_size_and_dimensions(
    reader, pictures, picture, note
):
    response = client_for(reader).get(transcript_url(pictures))
    assert response.status_code == 200
    page = response.content.decode()
    first, second = page.split('id="seq-1"')[1].split('id="seq-2"')
    assert first.index("holiday.png") < first.index("shopping.txt")
    assert "image/png" in first
    assert "text/plain" in first
    assert "40\u00d730 px" in first
    assert f'title="{len(PNG)} bytes"' in first
    assert f'title="{len(NOTE)} bytes"' in first
    assert file_url(pictures, picture) in first
    assert file_url(pictures, note) in first
    # Dimensions only where the file has them; the message without files lists none.
    assert first.count(" px") == 1
    assert '<ul class="files">' not in second


def test_listing_files_reads_them_in_one_query_whatever_the_page_holds(reader, owner):
    def queries(conversation: Conversation) -> int:
        client = client_for(reader)
        client.get(transcript_url(conversation))  # the session and permissions warmed
        with CaptureQueriesContext(connection) as captured:
            assert client.get(transcript_url(conversation)).status_code == 200
        return len(captured.captured_queries)

    few = with_files(owner, file_make(owner, b"one", "one.txt"), title="Few")
    many = services.conversation_create(owner=owner, title="Many")
    for turn in range(12):
        files = [file_make(owner, f"{turn}-{n}".encode(), f"{turn}-{n}.txt") for n in range(3)]
        services.user_message_append(
            conversation=many, content=f"turn {turn}", attachments=[str(f.pk) for f in files]
        )
    plain = services.conversation_create(owner=owner, title="Plain")
    services.user_message_append(conversation=plain, content="No files at all.")
    assert queries(many) == queries(few) == queries(plain)


# --- opening a file ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fixture", "data", "content_type", "disposition"),
    [
        ("picture", PNG, "image/png", "inline"),
        ("note", NOTE, "text/plain; charset=utf-8", "attachment"),
    ],
)
def test_opening_a_file_serves_its_bytes_with_the_safe_headers_and_is_audited(
    request, reader, owner, pictures, fixture, data, content_type, disposition
):
    file = request.getfixturevalue(fixture)
    response = client_for(reader).get(file_url(pictures, file))
    assert response.status_code == 200
    assert body_of(response) == data
    assert response["Content-Type"] == content_type
    assert response["Content-Length"] == str(len(data))
    assert response["Content-Disposition"].startswith(disposition)
    assert file.filename in response["Content-Disposition"]
    assert response["X-Content-Type-Options"] == "nosniff"
    assert response["Content-Security-Policy"] == "default-src 'none'; sandbox"
    # Each opening is read anew, never from a cache that would skip the trail.
    assert "no-store" in response["Cache-Control"]
    event = AuditEvent.objects.get()
    assert (event.action, event.actor_username) == ("viewed", "reader")
    assert (event.conversation_id, event.owner_id) == (pictures.pk, owner.pk)
    assert str(file.pk) in event.reason
    assert str(file.size) in event.reason
    assert file.content_type in event.reason


def test_each_opening_is_a_reading_of_its_own(reader, pictures, picture):
    client = client_for(reader)
    for _ in range(2):
        assert client.get(file_url(pictures, picture)).status_code == 200
    assert AuditEvent.objects.filter(action="viewed").count() == 2


def test_the_trail_names_the_file_but_not_its_name_which_moderators_could_read(
    reader, moderator, pictures, picture
):
    client_for(reader).get(file_url(pictures, picture))
    audit_list = client_for(moderator).get(reverse("admin:conversations_auditevent_changelist"))
    assert audit_list.status_code == 200
    assert str(picture.pk).encode() in audit_list.content
    assert b"holiday" not in audit_list.content


@pytest.mark.parametrize("visitor", ["moderator", "plain_staff"])
def test_staff_who_may_not_read_transcripts_are_refused_and_nothing_is_audited(
    request, visitor, pictures, picture
):
    response = client_for(request.getfixturevalue(visitor)).get(file_url(pictures, picture))
    assert response.status_code == 403
    assert b"Remember" not in response.content
    assert not AuditEvent.objects.exists()


def test_the_owner_who_is_not_staff_is_sent_to_the_admin_login(owner, pictures, picture):
    response = client_for(owner).get(file_url(pictures, picture))
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("admin:login"))


def test_a_file_of_another_conversation_is_not_found_there(reader, owner, outsider, pictures):
    # The owner's own file in another conversation, the owner's file in none, another
    # user's file in their conversation, and ids that name nothing.
    elsewhere = with_files(owner, file_make(owner, b"elsewhere", "else.txt"), title="Other")
    loose = file_make(owner, PDF, "loose.pdf")
    theirs = file_make(outsider, b"theirs", "theirs.txt")
    with_files(outsider, theirs, title="Theirs")
    other_file = StoredFile.objects.get(filename="else.txt")
    client = client_for(reader)
    for key in [other_file.pk, loose.pk, theirs.pk, "7d3c1f3e-0000-4000-8000-000000000000", "x"]:
        response = client.get(file_url(pictures, str(key)))
        assert response.status_code == 404, key
    assert client.get(file_url(elsewhere, other_file)).status_code == 200
    assert AuditEvent.objects.count() == 1


def test_a_file_of_an_unknown_conversation_is_not_found(reader, pictures, picture):
    url = reverse(
        "admin:conversations_conversation_file",
        args=["7d3c1f3e-0000-4000-8000-000000000000", picture.pk],
    )
    assert client_for(reader).get(url).status_code == 404
    assert not AuditEvent.objects.exists()


def test_a_file_a_fork_copied_opens_from_either_conversation(reader, owner, pictures, picture):
    fork = services.conversation_fork(conversation=pictures, at_seq=1)
    client = client_for(reader)
    assert client.get(file_url(fork, picture)).status_code == 200
    assert client.get(file_url(pictures, picture)).status_code == 200


# --- the usage page ---------------------------------------------------------------------


def test_the_usage_page_lists_files_and_bytes_stored_per_user(moderator, owner, outsider):
    file_make(owner, PNG, "a.png")
    file_make(owner, NOTE, "b.txt")
    file_make(outsider, b"x" * 5000, "big.txt")
    client = client_for(moderator)
    response = client.get(reverse("admin:conversations_conversation_usage"))
    assert response.status_code == 200
    rows = [(row.username, row.files, row.stored_bytes) for row in response.context["storage"]]
    assert rows == [("mallory", 1, 5000), ("alice", 2, len(PNG) + len(NOTE))]
    page = response.content.decode()
    table = page[page.index('id="usage-storage"') :]
    assert table.index("mallory") < table.index("alice")
    assert f'title="{len(PNG) + len(NOTE)} bytes"' in table
    by_files = client.get(reverse("admin:conversations_conversation_usage"), {"storage": "files"})
    assert [row.username for row in by_files.context["storage"]] == ["alice", "mallory"]
    # Aggregates only: no file's name is on the page.
    assert "b.txt" not in page
    assert "big.txt" not in page


def test_storage_per_user_is_one_query_whatever_the_number_of_users(moderator):
    client = client_for(moderator)
    url = reverse("admin:conversations_conversation_usage")

    def queries() -> tuple[int, int]:
        client.get(url)  # the session and permissions warmed
        with CaptureQueriesContext(connection) as captured:
            assert client.get(url).status_code == 200
        sql = [q["sql"] for q in captured.captured_queries]
        return len(sql), sum("conversations_storedfile" in q for q in sql)

    for n in range(2):
        file_make(User.objects.create_user(username=f"u{n}"), b"bytes", "f.txt")
    few, reads = queries()
    assert reads == 1
    for n in range(2, 12):
        file_make(User.objects.create_user(username=f"u{n}"), b"bytes", "f.txt")
    assert queries() == (few, 1)


def test_the_usage_page_says_when_no_files_are_stored(moderator):
    response = client_for(moderator).get(reverse("admin:conversations_conversation_usage"))
    assert b"No files stored." in response.content
