"""Folders, tags and pins: how a user keeps many conversations in order.

Folders are created, renamed, moved (positions stay 0..n-1 in the user's order) and
deleted (their conversations are then in none). A conversation's pin, folder and tags
change together in `conversation_organise`, which `conversation_update` calls in the
same transaction as the other settings, so a refused tag leaves a new title unstored.
Every change is told to all the owner's sockets after commit (`folders.changed`,
`conversation.organised`).

Names are unique per owner whatever their case; `services/organising_names.py` finds and
makes them. The writes that count or renumber what a user has lock the owner's row first,
so two tabs cannot both take the last place or interleave two renumberings.
"""

from collections.abc import Sequence
from typing import Any
from uuid import UUID

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Exists, OuterRef
from django.db.models.functions import Lower

from accounts.models import User
from conversations import notifications, validation
from conversations.errors import Problem, ValidationFailed
from conversations.models import Conversation, ConversationTag, Folder, Tag
from conversations.selectors.organising import (
    folder_items,
    folder_key,
    name_key,
    named,
    names_unique,
)
from conversations.serializers import conversation_organising_payload
from conversations.services.common import UNSET, owner_lock, raise_if
from conversations.services.organising_names import tags_ensure
from conversations.validation import type_name

NAME_TAKEN = "is the name of another of your folders"


# --- folders ------------------------------------------------------------------------------


def folder_create(*, owner: User, name: str, position: int | None = None) -> Folder:
    """A new folder at `position` in the owner's order (the end by default, or past it);
    the folders from there on move down one."""
    raise_if(
        validation.folder_name_problems(name) + _position_problems(position, path="$.position")
    )
    with transaction.atomic():
        owner_lock(owner.pk)
        ordered = _ordered(owner.pk)
        folders_room(owner_id=owner.pk, path="$.name", held=len(ordered))
        _name_check(owner=owner, name=name)
        at = len(ordered) if position is None else min(position, len(ordered))
        folder = Folder(owner=owner, name=name.strip(), position=at)
        _saved(folder, creating=True)
        _order_store([*ordered[:at], folder, *ordered[at:]])
        folders_changed_notify(owner.pk)
    return folder


def folder_update(*, folder: Folder, name: str = UNSET, position: int = UNSET) -> Folder:
    """Rename and/or move a folder; moving renumbers the others so positions stay
    0..n-1 (a position past the end is the end)."""
    problems = [] if name is UNSET else validation.folder_name_problems(name)
    if position is not UNSET:
        problems += _position_problems(position, path="$.position", nullable=False)
    raise_if(problems)
    with transaction.atomic():
        owner_lock(folder.owner_id)
        ordered = _ordered(folder.owner_id)
        current = next((item for item in ordered if item.pk == folder.pk), None)
        if current is None:
            raise Folder.DoesNotExist  # deleted meanwhile
        changed = False
        if name is not UNSET and name.strip() != current.name:
            _name_check(owner=folder.owner, name=name, other_than=folder.pk)
            current.name = name.strip()
            _saved(current, creating=False)
            changed = True
        if position is not UNSET:
            others = [item for item in ordered if item.pk != current.pk]
            at = min(position, len(others))
            changed = _order_store([*others[:at], current, *others[at:]]) or changed
        if changed:
            folders_changed_notify(folder.owner_id)
    return current


def folder_delete(*, folder: Folder) -> None:
    """Delete a folder; its conversations are then in no folder (one UPDATE), and the
    folders after it move up one."""
    with transaction.atomic():
        owner_lock(folder.owner_id)
        folder.delete()
        _order_store(_ordered(folder.owner_id))
        folders_changed_notify(folder.owner_id)


def folders_room(*, owner_id: int, path: str, held: int | None = None) -> None:
    """Refuse one more folder beyond PARLEY_MAX_FOLDERS (0: none); `held` when known."""
    limit: int = settings.PARLEY_MAX_FOLDERS
    if held is None and limit:
        held = Folder.objects.filter(owner_id=owner_id).count()
    if limit and held is not None and held >= limit:
        raise ValidationFailed(
            [Problem(path, f"you have {limit} folders, the most allowed; delete one first")]
        )


def _ordered(owner_id: int) -> list[Folder]:
    return list(Folder.objects.filter(owner_id=owner_id).order_by("position", Lower("name"), "id"))


def _order_store(folders: Sequence[Folder]) -> bool:
    """Number the folders 0..n-1 in this order, storing the positions that changed (one
    UPDATE); whether any did."""
    moved = []
    for index, folder in enumerate(folders):
        if folder.position != index:
            folder.position = index
            moved.append(folder)
    if moved:
        Folder.objects.bulk_update(moved, ["position"])
    return bool(moved)


def _position_problems(value: Any, *, path: str, nullable: bool = True) -> list[Problem]:
    if value is None and nullable:
        return []
    if isinstance(value, bool) or not isinstance(value, int):
        return [Problem(path, f"must be a whole number, not {type_name(value)}")]
    return [Problem(path, "must be at least 0")] if value < 0 else []


def _name_check(*, owner: User, name: str, other_than: UUID | None = None) -> None:
    taken = named(Folder, owner=owner, names=[name])
    if other_than is not None:
        taken = taken.exclude(pk=other_than)
    if taken.exists():
        raise ValidationFailed([Problem("$.name", NAME_TAKEN)])


def _saved(folder: Folder, *, creating: bool) -> None:
    try:
        with transaction.atomic():
            if creating:
                folder.save(force_insert=True)
            else:
                folder.save(update_fields=["name"])
    except IntegrityError:
        # Another request (an import) took the name between the check and the write.
        raise ValidationFailed([Problem("$.name", NAME_TAKEN)]) from None


def folders_changed_notify(owner_id: int) -> None:
    """Tell every tab of the owner their folder list, once the transaction commits."""
    notifications.user_notify(
        owner_id, notifications.FOLDERS_CHANGED, folders=folder_items(owner_id=owner_id)
    )


# --- a conversation's pin, folder and tags ------------------------------------------------


def organise_problems(
    *, pinned: Any = UNSET, folder_id: Any = UNSET, tags: Any = UNSET
) -> list[Problem]:
    """What is wrong with the values given, before anything is read."""
    problems = []
    if pinned is not UNSET and not isinstance(pinned, bool):
        problems.append(Problem("$.pinned", f"must be true or false, not {type_name(pinned)}"))
    if folder_id is not UNSET and not isinstance(folder_id, UUID | str | None):
        problems.append(
            Problem("$.folder_id", f"must be a folder's id or null, not {type_name(folder_id)}")
        )
    if tags is not UNSET:
        problems += validation.tag_names_problems(tags)
    return problems


def conversation_organise(
    *,
    conversation: Conversation,
    pinned: bool = UNSET,
    folder_id: UUID | str | None = UNSET,
    tags: list[str] = UNSET,
) -> bool:
    """Pin or unpin the conversation, file it in one of its owner's folders (or none),
    and/or replace its tags by `tags` (names, any case: an existing tag keeps its
    spelling, a new one is made; the same name twice counts once). Whether anything
    changed. Folder.DoesNotExist (a 404) for a folder that is not the owner's."""
    raise_if(organise_problems(pinned=pinned, folder_id=folder_id, tags=tags))
    with transaction.atomic():
        fields = []
        if pinned is not UNSET and pinned != conversation.pinned:
            conversation.pinned = pinned
            fields.append("pinned")
        if folder_id is not UNSET:
            key = None if folder_id is None else _folder_locked(conversation, folder_id)
            if key != conversation.folder_id:
                conversation.folder_id = key
                fields.append("folder")
        if fields:
            conversation.save(update_fields=fields)
        retagged = tags is not UNSET and _tags_replace(conversation, tags)
        if fields or retagged:
            notifications.user_notify(
                conversation.owner_id,
                notifications.ORGANISED,
                conversation_id=str(conversation.pk),
                **conversation_organising_payload(conversation),
            )
    return bool(fields or retagged)


def _folder_locked(conversation: Conversation, folder_id: UUID | str) -> UUID:
    """The owner's folder's id, its row locked so a delete waits for this transaction
    (and then takes the conversation out of it again)."""
    found = (
        Folder.objects.select_for_update()
        .filter(pk=folder_key(folder_id), owner_id=conversation.owner_id)
        .values_list("pk", flat=True)
        .first()
    )
    if found is None:
        raise Folder.DoesNotExist
    return found


def _tags_replace(conversation: Conversation, names: list[str]) -> bool:
    wanted = names_unique(names)
    current = {name_key(tag.name): tag for tag in conversation.tags.all()}
    if {name_key(name) for name in wanted} == set(current):
        return False
    owner_lock(conversation.owner_id)
    tags_room(
        owner=conversation.owner, adding=[name for name in wanted if name_key(name) not in current]
    )
    kept = tags_ensure(owner=conversation.owner, names=wanted)
    kept_ids = {tag.pk for tag in kept}
    dropped = [tag.pk for tag in current.values() if tag.pk not in kept_ids]
    if dropped:
        ConversationTag.objects.filter(conversation=conversation, tag_id__in=dropped).delete()
    had = {tag.pk for tag in current.values()}
    ConversationTag.objects.bulk_create(
        [ConversationTag(conversation=conversation, tag=tag) for tag in kept if tag.pk not in had],
        ignore_conflicts=True,
    )
    # The tags read (or prefetched) before are stale now.
    getattr(conversation, "_prefetched_objects_cache", {}).pop("tags", None)
    return True


def tags_room(*, owner: User, adding: Sequence[str], path: str = "$.tags") -> None:
    """Refuse tags the owner does not have yet beyond PARLEY_MAX_TAGS. At the limit, tags
    no conversation carries any more are deleted first (under the owner's lock, which
    every change of tags takes, so none is being put on a conversation meanwhile)."""
    limit: int = settings.PARLEY_MAX_TAGS
    if not limit or not adding:
        return
    theirs = Tag.objects.filter(owner=owner)
    if theirs.count() + len(adding) <= limit:
        return
    known = {name_key(tag.name) for tag in named(Tag, owner=owner, names=adding)}
    new = len([name for name in adding if name_key(name) not in known])
    if not new:
        return
    unused = ~Exists(ConversationTag.objects.filter(tag=OuterRef("pk")))
    # Not those about to be used again: `new` counted them as held.
    theirs.filter(unused).annotate(key=Lower("name")).exclude(key__in=known).delete()
    if theirs.count() + new > limit:
        raise ValidationFailed(
            [Problem(path, f"you have {limit} tags, the most allowed; remove some first")]
        )
