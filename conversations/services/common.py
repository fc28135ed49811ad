"""Pieces shared by the write services."""

from typing import Any

from accounts.models import User
from conversations.errors import Problem, ValidationFailed


class _Unset:
    """Marks a keyword the caller did not pass (None can be a real value)."""

    def __repr__(self) -> str:
        return "UNSET"


UNSET: Any = _Unset()


def raise_if(problems: list[Problem]) -> None:
    if problems:
        raise ValidationFailed(problems)


def owner_lock(owner_id: int) -> None:
    """Lock the owner's row for the rest of the transaction: the writes that count what a
    user has (files' bytes, folders, tags) take turns per user, so two at once cannot
    both take the last place."""
    list(User.objects.select_for_update().filter(pk=owner_id).values_list("pk", flat=True))
