"""Pieces shared by the write services."""

from typing import Any

from django.db import connection
from django.db.models import Field, Model

from conversations.errors import Problem, ValidationFailed


class _Unset:
    """Marks a keyword the caller did not pass (None can be a real value)."""

    def __repr__(self) -> str:
        return "UNSET"


UNSET: Any = _Unset()


def raise_if(problems: list[Problem]) -> None:
    if problems:
        raise ValidationFailed(problems)


def column(model: type[Model], name: str) -> str:
    """A field's column, quoted, for the few statements of the hot paths written as SQL."""
    field = model._meta.get_field(name)
    assert isinstance(field, Field)
    return connection.ops.quote_name(field.column)
