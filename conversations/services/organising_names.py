"""Folders and tags found by name, made when missing: the one place both the organising
API and an import turn names into rows.

Names are unique per owner whatever their case (a database constraint on the name's
lower case), so an existing row keeps its own spelling, and two writers making the same
name at once end with one row: the loser's insert fails inside a savepoint and it reads
the winner's.
"""

from collections.abc import Sequence

from django.db import IntegrityError, transaction
from django.db.models import Max

from accounts.models import User
from conversations.models import Folder, Tag
from conversations.selectors.organising import Named, name_key, named, names_unique


def tags_ensure(*, owner: User, names: Sequence[str]) -> list[Tag]:
    """The owner's tags of these names (checked by the caller), in the order given, made
    when missing. One query when all exist."""
    wanted = names_unique(names)
    if not wanted:
        return []
    found = {name_key(tag.name): tag for tag in named(Tag, owner=owner, names=wanted)}
    return [
        found.get(name_key(name)) or _made_or_found(Tag, owner=owner, name=name) for name in wanted
    ]


def folder_ensure(*, owner: User, name: str) -> Folder:
    """The owner's folder of this name, made at the end of their order when missing."""
    folder = named(Folder, owner=owner, names=[name]).first()
    if folder is not None:
        return folder
    last = Folder.objects.filter(owner=owner).aggregate(last=Max("position"))["last"]
    return _made_or_found(
        Folder, owner=owner, name=name.strip(), position=0 if last is None else last + 1
    )


def _made_or_found(model: type[Named], *, owner: User, name: str, **extra: int) -> Named:
    try:
        with transaction.atomic():
            return model.objects.create(owner=owner, name=name, **extra)
    except IntegrityError:
        return named(model, owner=owner, names=[name]).get()
