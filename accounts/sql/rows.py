"""The row reader every app's hand-written statements use: INSERT and UPDATE statements
made once from a model's fields, and rows read back into the instances the ORM makes.

What goes in is prepared and what comes out converted exactly as the ORM does it (the
fields' own `get_db_prep_save` and the backend's and fields' converters), so the
instances are the ones the ORM would make, on PostgreSQL and SQLite alike. It lives in
accounts, the app every other one may import.
"""

from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import cache, cached_property
from typing import Any, Generic, TypeVar

from django.db import DEFAULT_DB_ALIAS, connection, connections
from django.db.models import Field, Model
from django.db.models.base import ModelState
from django.db.models.expressions import Col
from django.db.models.signals import post_init, pre_init

M = TypeVar("M", bound=Model)
Converter = Callable[[Any, Any, Any], Any]
Statement = tuple[str, list[Any]]  # SQL with its parameters


def _db() -> Any:
    """This thread's connection itself: each attribute read through `django.db.connection`
    looks it up again, and preparing a row's values reads dozens."""
    return connections[DEFAULT_DB_ALIAS]


class Rows(Generic[M]):
    """One model's rows: made into instances, inserted, and read back from a statement
    that selects (or returns) `columns()`. Built once per model and set of fields; what
    depends on the database is worked out at first use."""

    def __init__(self, model: type[M], names: Sequence[str] | None = None) -> None:
        self.model = model
        every = model._meta.concrete_fields
        wanted = {model._meta.get_field(name) for name in names} if names else set(every)
        # In the model's order, which `from_db` takes them in.
        self.fields: tuple[Field[Any, Any], ...] = tuple(f for f in every if f in wanted)
        assert len(self.fields) == len(wanted), "concrete fields only"
        self.attnames = tuple(field.attname for field in self.fields)
        self._whole = len(self.fields) == len(every)
        self._inserts: dict[int, str] = {}  # the INSERT statement, by number of rows

    @property
    def table(self) -> str:
        return connection.ops.quote_name(self.model._meta.db_table)

    def columns(self, alias: str = "") -> str:
        """The fields' columns, quoted (and qualified by `alias`), in their order."""
        prefix = f"{alias}." if alias else ""
        quote = connection.ops.quote_name
        return ", ".join(prefix + quote(field.column) for field in self.fields)

    @cached_property
    def _converters(self) -> list[tuple[int, list[Converter], Col]]:
        found = []
        for position, field in enumerate(self.fields):
            col, converters = _converters(self.model, field.name, connection)
            if converters:
                found.append((position, converters, col))
        return found

    def read(self, row: Sequence[Any]) -> M:
        """The instance of a row of `columns()` (and maybe more after them, left out),
        as the ORM reads it: a model instance already stored."""
        db = _db()
        values = list(row[: len(self.fields)])
        for position, converters, col in self._converters:
            value = values[position]
            for converter in converters:
                value = converter(value, col, db)
            values[position] = value
        return self._instance(values)

    def new(self, values: Mapping[str, Any]) -> M:
        """An instance (of every field: made for `insert`) with these values by attname and
        the fields' defaults for the rest, as `Model(**values)` makes it, marked stored:
        the caller inserts it in the same transaction."""
        assert self._whole, "an insert writes every field"
        # A field set by `pre_save` (auto_now) would be left empty: none may be here.
        assert not any(
            getattr(f, "auto_now", False) or getattr(f, "auto_now_add", False) for f in self.fields
        ), "auto_now fields are set by save(), not here"
        row = [
            values[field.attname] if field.attname in values else field.get_default()
            for field in self.fields
        ]
        return self._instance(row)

    def _instance(self, values: list[Any]) -> M:
        """`from_db(alias, attnames, values)`, made as `Model.__init__` would make it but
        without its per-field work (a tenth of the CPU) when nothing listens for it."""
        model = self.model
        if pre_init.has_listeners(model) or post_init.has_listeners(model):
            return model.from_db(DEFAULT_DB_ALIAS, self.attnames, values)
        instance = model.__new__(model)
        state = instance._state = ModelState()
        state.adding, state.db = False, DEFAULT_DB_ALIAS
        # What `__init__` sets (and leaves out for a deferred field), by attname.
        instance.__dict__.update(zip(self.attnames, values, strict=True))
        return instance

    def insert(self, instances: Iterable[M]) -> Statement:
        """One INSERT of these instances' every field, prepared as `bulk_create` does
        (for `execute`)."""
        db = _db()
        params: list[Any] = []
        for instance in instances:
            params += [
                field.get_db_prep_save(getattr(instance, field.attname), db)
                for field in self.fields
            ]
        assert params, "at least one row"
        return self._insert_sql(len(params) // len(self.fields)), params

    def _insert_sql(self, count: int) -> str:
        sql = self._inserts.get(count)
        if sql is None:
            row = f"({', '.join(['%s'] * len(self.fields))})"
            values = ", ".join([row] * count)
            sql = self._inserts[count] = (
                f"INSERT INTO {self.table} ({self.columns()}) VALUES {values}"
            )
        return sql


@cache
def _row_update_sql(model: type[Model], names: tuple[str, ...]) -> str:
    sets = ", ".join(f"{column(model, name)} = %s" for name in names)
    table = connection.ops.quote_name(model._meta.db_table)
    return f"UPDATE {table} SET {sets} WHERE {column(model, 'pk')} = %s"


def _converters(model: type[Model], name: str, db: Any) -> tuple[Col, list[Converter]]:
    col = model._meta.get_field(name).get_col(model._meta.db_table)  # type: ignore[union-attr]
    return col, db.ops.get_db_converters(col) + col.get_db_converters(db)


def value_reader(model: type[Model], name: str, db: Any = None) -> Callable[[Any], Any]:
    """What the ORM makes of a column's raw value (the backend's converters, then the
    field's own: an aware datetime on SQLite, decoded JSON), for a value read by SQL."""
    db = db if db is not None else _db()
    col, converters = _converters(model, name, db)

    def read(value: Any) -> Any:
        for converter in converters:
            value = converter(value, col, db)
        return value

    return read


def column(model: type[Model], name: str) -> str:
    """A field's column (or the primary key's, for "pk"), quoted."""
    field = model._meta.pk if name == "pk" else model._meta.get_field(name)
    assert isinstance(field, Field)
    return connection.ops.quote_name(field.column)


def row_update(model: type[Model], pk: Any, values: Mapping[str, Any]) -> Statement:
    """`model.objects.filter(pk=pk).update(**values)` for plain values (not expressions),
    by a statement written once per set of fields (for `execute`)."""
    db = _db()
    fields = [model._meta.get_field(name) for name in values]
    params = [
        field.get_db_prep_save(value, db)
        for field, value in zip(fields, values.values(), strict=True)
        if isinstance(field, Field) and not hasattr(value, "resolve_expression")
    ]
    assert len(params) == len(fields), "plain values of concrete fields only"
    pk_field = model._meta.pk
    assert pk_field is not None
    params.append(pk_field.get_db_prep_value(pk, db))
    return _row_update_sql(model, tuple(values)), params


def execute(*statements: Statement) -> None:
    """Run these writes, whose results nobody reads, inside the caller's transaction. On
    PostgreSQL they go as one statement (all but the last in a WITH): one round trip, and
    a fraction of the CPU each costs the client on its own. They then run in one
    snapshot in no set order, so none may touch a table another one writes; elsewhere
    they run one by one, in order."""
    if not statements:
        return
    db = _db()
    with db.cursor() as cursor:
        if db.vendor != "postgresql" or len(statements) == 1:
            for sql, params in statements:
                cursor.execute(sql, params)
            return
        head = ", ".join(f"w{n} AS ({sql})" for n, (sql, _) in enumerate(statements[:-1]))
        cursor.execute(
            f"WITH {head} {statements[-1][0]}", [p for _, params in statements for p in params]
        )
