"""Folders and tags found by name, made when missing: the one place both the organising
API and an import turn names into rows.

Names are unique per owner whatever their case (a database constraint on the name's
lower case), so an existing row keeps its own spelling, and two writers making the same
name at once end with one row: the loser's insert fails inside a savepoint and it reads
the winner's.
"""

from collections.abc import Sequence
from typing import TypeVar

from django.db import IntegrityError, transaction
from django.db.models import Max, QuerySet
from django.db.models.functions import Lower

from accounts.models import User
from conversations.models import Folder, Tag

Named = TypeVar("Named", Folder, Tag)


def name_key(name: str) -> str:
    """What makes two names the same: the lower case the database's constraint uses."""
    return name.strip().lower()


def names_unique(names: Sequence[str]) -> list[str]:
    """The names stripped, the first spelling of each kept whatever the case, in order."""
    seen: set[str] = set()
    kept: list[str] = []
    for name in names:
        name = name.strip()
        if name and name_key(name) not in seen:
            seen.add(name_key(name))
            kept.append(name)
    return kept


def named(model: type[Named], *, owner: User, names: Sequence[str]) -> QuerySet[Named]:
    """The owner's rows of these names, whatever their case."""
    keys = [name_key(name) for name in names]
    return model.objects.annotate(key=Lower("name")).filter(owner=owner, key__in=keys)


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
