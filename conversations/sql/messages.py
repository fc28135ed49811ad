"""Messages' hand-written statements: an append's writes (the branch's counter moved and
read back, the messages inserted with the usage rollup and the conversation's counters),
the model's history read along a branch's path, and the search column."""

from collections.abc import Mapping, Sequence
from functools import cache
from typing import Any, NamedTuple
from uuid import UUID

from django.contrib.postgres.search import SearchVectorField
from django.db import DEFAULT_DB_ALIAS, connection, connections
from django.db.models import UUIDField
from django.db.models.expressions import RawSQL

from accounts.sql import Rows, Statement, column, execute, row_update, value_reader
from conversations.context import FileInput
from conversations.models import Attachment, Branch, Conversation, Message, UsageDay
from conversations.validation import USAGE_COUNTS

_BRANCHES, _MESSAGES = Rows(Branch), Rows(Message)
_UUIDS: "UUIDField[Any, Any]" = UUIDField()
NO_CALLS = "[]"  # how both databases give back an empty list of tool calls
USAGE_SUMS = ("messages", "user_messages", *USAGE_COUNTS)


# --- an append ------------------------------------------------------------------------------


@cache
def _branch_advance_sql() -> str:
    count = column(Branch, "message_count")
    return (
        f"UPDATE {_BRANCHES.table} SET {count} = {count} + %s "
        f"WHERE {column(Branch, 'id')} = %s AND {column(Branch, 'conversation')} = %s "
        f"RETURNING {_BRANCHES.columns()}"
    )


def branch_count_advance(*, branch_id: UUID, conversation_id: UUID, by: int) -> Branch | None:
    """Move the conversation's branch's message counter on by `by` and read the branch
    back, in one statement (UPDATE ... RETURNING); None when the branch is not the
    conversation's. Under the conversation's lock, like every append."""
    params = [
        by,
        _UUIDS.get_db_prep_value(branch_id, connection),
        _UUIDS.get_db_prep_value(conversation_id, connection),
    ]
    with connection.cursor() as cursor:
        cursor.execute(_branch_advance_sql(), params)
        row = cursor.fetchone()
    return None if row is None else _BRANCHES.read(row)


def message_new(*, values: Mapping[str, Any]) -> Message:
    """A Message with these values by attname and the fields' defaults for the rest, as
    `Message(**values)` makes it, marked stored: `messages_append_write` inserts it."""
    return _MESSAGES.new(values)


@cache
def _usage_sql() -> str:
    table = connection.ops.quote_name(UsageDay._meta.db_table)
    columns = [column(UsageDay, name) for name in ("day", "owner", "conversation_id")]
    sums = [column(UsageDay, name) for name in USAGE_SUMS]
    every = [*columns, *sums]
    # PostgreSQL and SQLite (3.24+) both take this: one statement whether or not the
    # conversation already has a row for the day.
    return (
        f"INSERT INTO {table} ({', '.join(every)}) "
        f"VALUES ({', '.join(['%s'] * len(every))}) "
        f"ON CONFLICT ({columns[0]}, {columns[2]}) DO UPDATE SET "
        + ", ".join(f"{name} = {table}.{name} + excluded.{name}" for name in sums)
    )


def _usage_add(day: UsageDay) -> Statement:
    db = connections[DEFAULT_DB_ALIAS]
    conversation = UsageDay._meta.get_field("conversation_id").get_db_prep_value(
        day.conversation_id, db
    )
    sums = [getattr(day, name) for name in USAGE_SUMS]
    return _usage_sql(), [db.ops.adapt_datefield_value(day.day), day.owner_id, conversation, *sums]


def messages_append_write(
    *,
    messages: Sequence[Message],
    usage: Sequence[UsageDay],
    branch_count: tuple[UUID, int] | None,
    conversation_id: UUID,
    conversation_values: Mapping[str, Any],
) -> None:
    """An append's writes, inside the caller's transaction and lock: the messages
    (made by `message_new`) inserted; each of `usage` (a day's counts) added to its
    day's row, made if missing; the branch's counter set (`branch_count`: its id and
    value; None when `branch_count_advance` moved it); the conversation's plain
    `conversation_values` set. On PostgreSQL as one statement."""
    writes = [_MESSAGES.insert(messages), *(_usage_add(day) for day in usage)]
    if branch_count is not None:
        branch_id, count = branch_count
        writes.append(row_update(Branch, branch_id, {"message_count": count}))
    writes.append(row_update(Conversation, conversation_id, conversation_values))
    execute(*writes)


# --- the model's history --------------------------------------------------------------------


class HistoryRow(NamedTuple):
    """The fields of a stored message that the model sees (context.StoredMessage)."""

    role: str
    content: str
    tool_calls: list[dict[str, str]]
    tool_call_id: str
    # Where it stands on the path, and what it is: a compaction leaves out the messages
    # it covers (context.compaction_applied), read from its payload, the only one read.
    seq: int = 0
    kind: str = Message.Kind.MESSAGE
    provider_payload: dict[str, Any] | None = None
    # The message's id when files are attached to it (their reading is left to the
    # caller: selectors.model_files), else None.
    with_files: UUID | None = None
    files: tuple[FileInput, ...] = ()


def path_history_read(*, ranges: Sequence[tuple[UUID, int, int]]) -> list[HistoryRow]:
    """The messages with low < seq <= high on each `(branch id, low, high)`, in seq
    order, as plain tuples: this read runs before every model call on up to a few hundred
    rows, and only a message with tool calls has JSON worth decoding."""
    if not ranges:
        return []
    db = connections[DEFAULT_DB_ALIAS]
    params: list[Any] = []
    for key, low, high in ranges:
        params += [_UUIDS.get_db_prep_value(key, db), low, high]
    with db.cursor() as cursor:
        cursor.execute(_history_sql(len(ranges)), params)
        rows = cursor.fetchall()
    decode = value_reader(Message, "tool_calls", db)  # JSON, as the ORM decodes it
    payload = value_reader(Message, "provider_payload", db)
    uuid = value_reader(Message, "id", db)
    return [
        HistoryRow(
            role,
            content,
            [] if calls == NO_CALLS else decode(calls),
            call_id,
            seq=seq,
            kind=kind,
            provider_payload=payload(compaction) if compaction is not None else None,
            with_files=uuid(with_files) if with_files is not None else None,
        )
        for role, content, calls, call_id, seq, kind, compaction, with_files in rows
    ]


@cache
def _history_sql(segments: int) -> str:
    def name(field: str) -> str:
        return column(Message, field)

    wanted = ", ".join(
        name(field) for field in ("role", "content", "tool_calls", "tool_call_id", "seq", "kind")
    )
    seq = name("seq")
    # Only a compaction's payload is read: it says which messages the summary covers.
    compaction = (
        f"CASE WHEN {name('kind')} = '{Message.Kind.COMPACTION}' "
        f"THEN {name('provider_payload')} END"
    )
    one = f"({name('branch')} = %s AND {seq} > %s AND {seq} <= %s)"
    table = connection.ops.quote_name(Message._meta.db_table)
    # An index probe per user message (attachments by message): files are read only for
    # the messages that have some.
    attachments = connection.ops.quote_name(Attachment._meta.db_table)
    linked = connection.ops.quote_name(Attachment._meta.get_field("message").column)
    with_files = (
        f"CASE WHEN {name('role')} = 'user' AND EXISTS (SELECT 1 FROM {attachments} "
        f"WHERE {attachments}.{linked} = {table}.{name('id')}) THEN {table}.{name('id')} END"
    )
    return (
        f"SELECT {wanted}, {compaction}, {with_files} FROM {table} "
        f"WHERE {' OR '.join([one] * segments)} ORDER BY {seq} ASC"
    )


# --- search ---------------------------------------------------------------------------------


def message_search_vector() -> RawSQL:
    """The messages' `search_vector` column (PostgreSQL only): a column the migrations
    keep up to date and no model field names, since SQLite has none."""
    table = connection.ops.quote_name(Message._meta.db_table)
    return RawSQL(f"{table}.search_vector", [], output_field=SearchVectorField())
