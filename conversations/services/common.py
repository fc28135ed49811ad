"""Pieces shared by the write services."""

from typing import Any

from conversations.errors import Problem, ValidationFailed


class _Unset:
    """Marks a keyword the caller did not pass (None can be a real value)."""

    def __repr__(self) -> str:
        return "UNSET"


UNSET: Any = _Unset()


def raise_if(problems: list[Problem]) -> None:
    if problems:
        raise ValidationFailed(problems)
