"""How an imported conversation is organised: the tags, folder and pin its document
names (version 2), the tags and folder found by name among the importer's own whatever
their case, or made (a new folder goes last in their order), within their limits.

The limits are checked before anything is stored and again, under the owner's lock, in
the import's last transaction, which makes what is missing: a refused import leaves no
tag or folder behind.
"""

from accounts.models import User
from conversations.formats.importing import ImportedConversation
from conversations.models import Conversation, ConversationTag, Folder
from conversations.selectors.organising import named, names_unique
from conversations.services.common import owner_lock
from conversations.services.organising import folders_changed_notify, folders_room, tags_room
from conversations.services.organising_names import folder_ensure, tags_ensure


def import_organising_check(*, owner: User, data: ImportedConversation) -> None:
    """Refuse tags and a folder the owner does not have yet beyond their limits, as the
    organising API does (under the owner's lock, which every change of them takes)."""
    tags = names_unique(getattr(data, "tags", []))
    folder = getattr(data, "folder", None)
    if not tags and folder is None:
        return
    owner_lock(owner.pk)
    tags_room(owner=owner, adding=tags, path="$.conversation.tags")
    if folder is not None and not named(Folder, owner=owner, names=[folder]).exists():
        folders_room(owner_id=owner.pk, path="$.conversation.folder")


def import_organise(
    *, owner: User, conversation: Conversation, data: ImportedConversation
) -> Folder | None:
    """Tag the imported conversation as its document says, inside the caller's
    transaction; its folder (made when missing), which the caller stores with the rest."""
    names = getattr(data, "tags", [])
    folder = getattr(data, "folder", None)
    if not names and folder is None:
        return None
    import_organising_check(owner=owner, data=data)
    ConversationTag.objects.bulk_create(
        ConversationTag(conversation_id=conversation.pk, tag=tag)
        for tag in tags_ensure(owner=owner, names=names)
    )
    if folder is None:
        return None
    filed = folder_ensure(owner=owner, name=folder)
    # The owner's other tabs show a folder the import made (the list as it now stands).
    folders_changed_notify(owner.pk)
    return filed
