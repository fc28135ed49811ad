"""Folders, tags and pins in the services: the user's order of folders stays 0..n-1,
names are one whatever their case, the limits hold, and a refused change stores
nothing (the other settings of the same update included)."""

import pytest

from conversations import services
from conversations.errors import ValidationFailed
from conversations.models import Conversation, ConversationTag, Folder, Tag
from conversations.serializers import conversation_payload

pytestmark = pytest.mark.django_db


def _order(owner) -> list[tuple[str, int]]:
    return list(
        Folder.objects.filter(owner=owner).order_by("position").values_list("name", "position")
    )


def _paths(error: ValidationFailed) -> list[str]:
    return [problem.path for problem in error.problems]


def test_folders_keep_positions_zero_to_n_in_the_users_order(owner):
    for name in ("Work", "Home", "Trips"):
        services.folder_create(owner=owner, name=f"  {name} ")
    assert _order(owner) == [("Work", 0), ("Home", 1), ("Trips", 2)]

    first = services.folder_create(owner=owner, name="Inbox", position=0)
    assert first.position == 0
    assert _order(owner) == [("Inbox", 0), ("Work", 1), ("Home", 2), ("Trips", 3)]

    trips = Folder.objects.get(owner=owner, name="Trips")
    services.folder_update(folder=trips, position=1)
    assert _order(owner) == [("Inbox", 0), ("Trips", 1), ("Work", 2), ("Home", 3)]
    # Past the end is the end.
    services.folder_update(folder=trips, position=99)
    assert _order(owner) == [("Inbox", 0), ("Work", 1), ("Home", 2), ("Trips", 3)]

    services.folder_delete(folder=Folder.objects.get(owner=owner, name="Work"))
    assert _order(owner) == [("Inbox", 0), ("Home", 1), ("Trips", 2)]


def test_folder_names_are_unique_whatever_their_case(owner, outsider):
    work = services.folder_create(owner=owner, name="Work")
    with pytest.raises(ValidationFailed) as refused:
        services.folder_create(owner=owner, name=" WORK ")
    assert _paths(refused.value) == ["$.name"]
    # Another user's names are theirs; a new case of its own name is a rename.
    services.folder_create(owner=outsider, name="work")
    services.folder_update(folder=work, name="WORK")
    assert Folder.objects.get(pk=work.pk).name == "WORK"
    home = services.folder_create(owner=owner, name="Home")
    with pytest.raises(ValidationFailed):
        services.folder_update(folder=home, name="work")


@pytest.mark.parametrize("name", ["", "   ", "a" * 101, "two\nlines", 7])
def test_bad_folder_names_are_refused(owner, name):
    with pytest.raises(ValidationFailed) as refused:
        services.folder_create(owner=owner, name=name)
    assert _paths(refused.value) == ["$.name"]
    assert not Folder.objects.exists()


def test_the_folder_limit(owner, settings):
    settings.PARLEY_MAX_FOLDERS = 2
    services.folder_create(owner=owner, name="a")
    services.folder_create(owner=owner, name="b")
    with pytest.raises(ValidationFailed):
        services.folder_create(owner=owner, name="c")
    assert Folder.objects.filter(owner=owner).count() == 2


def test_deleting_a_folder_leaves_its_conversations_unfiled(owner, conversation):
    folder = services.folder_create(owner=owner, name="Work")
    services.conversation_organise(conversation=conversation, folder_id=folder.pk)
    services.folder_delete(folder=folder)
    conversation.refresh_from_db()
    assert conversation.folder_id is None


def test_tags_are_made_reused_whatever_their_case_and_replaced_whole(owner, conversation):
    services.conversation_organise(conversation=conversation, tags=[" Work ", "urgent", "WORK"])
    assert conversation_payload(conversation)["tags"] == ["urgent", "Work"]

    other = services.conversation_create(owner=owner)
    services.conversation_organise(conversation=other, tags=["work"])
    # An existing tag keeps its stored spelling.
    assert conversation_payload(other)["tags"] == ["Work"]
    assert Tag.objects.filter(owner=owner).count() == 2

    services.conversation_organise(conversation=conversation, tags=["later"])
    assert conversation_payload(conversation)["tags"] == ["later"]
    # The same names in other cases change nothing.
    assert not services.conversation_organise(conversation=conversation, tags=["LATER"])


@pytest.mark.parametrize(
    ("tags", "path"),
    [
        ("work", "$.tags"),
        ([1], "$.tags[0]"),
        (["ok", ""], "$.tags[1]"),
        (["x" * 65], "$.tags[0]"),
        (["tab\there"], "$.tags[0]"),
        ([f"t{n}" for n in range(21)], "$.tags"),
    ],
)
def test_bad_tags_change_nothing_not_even_the_title(owner, conversation, tags, path):
    services.conversation_organise(conversation=conversation, tags=["kept"])
    with pytest.raises(ValidationFailed) as refused:
        services.conversation_update(conversation=conversation, title="New title", tags=tags)
    assert path in _paths(refused.value)
    stored = Conversation.objects.get(pk=conversation.pk)
    assert stored.title != "New title"
    assert conversation_payload(stored)["tags"] == ["kept"]


def test_a_refused_folder_rolls_back_the_other_fields(owner, outsider, conversation):
    theirs = services.folder_create(owner=outsider, name="Theirs")
    with pytest.raises(Folder.DoesNotExist):
        services.conversation_update(
            conversation=conversation, title="New", pinned=True, folder_id=theirs.pk
        )
    stored = Conversation.objects.get(pk=conversation.pk)
    assert (stored.title, stored.pinned, stored.folder_id) == (conversation.title, False, None)


def test_the_per_user_tag_limit_counts_only_tags_in_use_once_reached(owner, settings):
    settings.PARLEY_MAX_TAGS = 3
    first, second = (
        services.conversation_create(owner=owner),
        services.conversation_create(owner=owner),
    )
    services.conversation_organise(conversation=first, tags=["a", "b", "c"])
    with pytest.raises(ValidationFailed) as refused:
        services.conversation_organise(conversation=second, tags=["d"])
    assert _paths(refused.value) == ["$.tags"]
    # Reusing one is no new tag.
    services.conversation_organise(conversation=second, tags=["A"])
    # Tags no conversation carries make room once the limit is reached.
    services.conversation_organise(conversation=first, tags=[])
    services.conversation_organise(conversation=second, tags=["a", "d", "e"])
    assert sorted(Tag.objects.filter(owner=owner).values_list("name", flat=True)) == [
        "a",
        "d",
        "e",
    ]
    assert ConversationTag.objects.filter(conversation=second).count() == 3


def test_an_unused_tag_taken_up_again_still_counts_toward_the_limit(owner, settings):
    settings.PARLEY_MAX_TAGS = 3
    first, second = (
        services.conversation_create(owner=owner),
        services.conversation_create(owner=owner),
    )
    services.conversation_organise(conversation=first, tags=["x", "y"])
    services.conversation_organise(conversation=second, tags=["d"])
    services.conversation_organise(conversation=second, tags=[])

    with pytest.raises(ValidationFailed):
        services.conversation_organise(conversation=second, tags=["d", "f"])

    assert Tag.objects.filter(owner=owner).count() == 3
    services.conversation_organise(conversation=second, tags=["D"])
    assert Tag.objects.filter(owner=owner).count() == 3
