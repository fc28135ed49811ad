"""Pieces shared by the write services."""

from typing import Any

from config.rows import column as column  # the hot paths' SQL names columns with it
from conversations.errors import Problem, ValidationFailed


class _Unset:
    """Marks a keyword the caller did not pass (None can be a real value)."""

    def __repr__(self) -> str:
        return "UNSET"


UNSET: Any = _Unset()


def raise_if(problems: list[Problem]) -> None:
    if problems:
        raise ValidationFailed(problems)
