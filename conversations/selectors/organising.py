"""Reads of how a user organises their conversations: their folders (each with how many
conversations it holds), their tags in use (each with its count), one folder by id, and
the conversations under a tag, for the list's and the search's filters.

Counts cover the conversations a user is shown (not those an import is still storing),
archived ones included. Names are matched whatever their case, as they are unique: by
`name_key`, here once for every reader and writer of names.
"""

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeVar
from uuid import UUID

from django.db.models import Count, IntegerField, OuterRef, Q, QuerySet, Subquery
from django.db.models.functions import Coalesce, Lower

from accounts.models import User
from conversations.models import Conversation, ConversationTag, Folder, Tag

# Either kind of named row: names are unique per owner whatever their case.
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


@dataclass(frozen=True)
class TagUse:
    name: str
    # The user's shown conversations carrying it (at least one).
    count: int


def folder_key(folder_id: UUID | str) -> UUID:
    """A folder id as a UUID; Folder.DoesNotExist (a 404) for one that is none."""
    try:
        return UUID(str(folder_id))
    except ValueError:
        raise Folder.DoesNotExist from None


def folder_get(*, user: User, folder_id: UUID | str) -> Folder:
    """The user's folder, or Folder.DoesNotExist (a 404, also for another user's or a
    malformed id)."""
    return Folder.objects.get(pk=folder_key(folder_id), owner=user)


def _shown_count(rows: QuerySet[Any, Any], *, group: str, conversation: str, user: User) -> Any:
    """How many of `rows` (a link to a conversation per row, `conversation` naming it,
    filtered on the outer row's id by `group`) belong to the user's shown conversations:
    a subquery reading the rows' own index, those an import still stores (few or none,
    found by their own small index) left out."""
    hidden = Conversation.with_imports.filter(owner=user, import_started_at__isnull=False)
    counted = (
        rows.exclude(**{f"{conversation}__in": hidden.values("pk")})
        .order_by()
        .values(group)
        .annotate(n=Count(conversation))
        .values("n")
    )
    return Coalesce(Subquery(counted, output_field=IntegerField()), 0)


def folders_for_user(*, user: User) -> list[Folder]:
    """The user's folders in their order, each with `conversation_count`, in one query
    that reads the folder index, never the user's whole table."""
    held = Conversation.with_imports.filter(folder=OuterRef("pk"))
    return list(
        Folder.objects.filter(owner=user)
        .annotate(
            conversation_count=_shown_count(held, group="folder", conversation="pk", user=user)
        )
        .order_by("position", Lower("name"), "id")
    )


def folder_items(*, owner_id: int) -> list[dict[str, Any]]:
    """The owner's folders in their order as `folders.changed` lists them."""
    rows = Folder.objects.filter(owner_id=owner_id).order_by("position", Lower("name"), "id")
    return [
        {"id": str(pk), "name": name, "position": position}
        for pk, name, position in rows.values_list("pk", "name", "position")
    ]


def tags_with_counts(*, user: User) -> list[TagUse]:
    """The user's tags in use (on at least one of their shown conversations), by name
    whatever its case, each with its count: one query that reads the (tag, conversation)
    index, never the conversation table."""
    links = ConversationTag.objects.filter(tag=OuterRef("pk"))
    rows = (
        Tag.objects.filter(owner=user)
        .annotate(count=_shown_count(links, group="tag", conversation="conversation_id", user=user))
        .order_by(Lower("name"), "name")
        .values_list("name", "count")
    )
    # Those no conversation carries are left out here: a filter would count twice.
    return [TagUse(name=name, count=count) for name, count in rows if count]


def tagged_filter(*, user: User, names: Sequence[str], field: str = "pk") -> Q | None:
    """A filter on `field` (a conversation's id) keeping the user's conversations under
    every one of `names` (any case); None when one names no tag of theirs, so that nothing
    is under it. The tags' ids are read first (one query) and put in the filter as
    values: the planner then knows each tag's size and, for a common one, walks the list's
    index instead of reading the whole tag (a tag as a subquery is a guess)."""
    wanted = {name_key(name) for name in names}
    if not wanted:
        return Q()
    found = list(named(Tag, owner=user, names=list(wanted)).values_list("pk", flat=True))
    if len(found) < len(wanted):
        return None
    under = Q()
    for tag_id in found:
        tagged = ConversationTag.objects.filter(tag_id=tag_id).values("conversation_id")
        under &= Q(**{f"{field}__in": tagged})
    return under
