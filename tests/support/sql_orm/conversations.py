"""The ORM equivalents of conversations' hand-written statements (conversations/sql): what
each would be without raw SQL, with the same conditions, locking and results. The tests
check each statement against its equivalent (tests/conversations/test_sql.py);
bench/sql_paths.py times both."""

import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from django.contrib.postgres.search import SearchVector
from django.db.models import DateTimeField, Exists, F, OuterRef, Q, Value
from django.db.models.functions import Coalesce

from conversations.models import Branch, Conversation, Message, Run, UsageDay
from conversations.selectors.branches import path_messages
from conversations.sql import HistoryRow
from conversations.sql.messages import USAGE_SUMS


def conversation_run_lock(
    *, conversation_id: uuid.UUID, owner_id: int, client_id: str, fields: tuple[str, ...]
) -> tuple[Conversation, bool, bool] | None:
    runs = Run.objects.filter(conversation=OuterRef("pk"))
    taken: Any = Exists(runs.filter(client_id=client_id)) if client_id else Value(False)
    locked = (
        Conversation.objects.select_for_update()
        .only(*fields)
        .annotate(
            run_active=Exists(runs.filter(status__in=Run.ACTIVE_STATUSES)),
            client_id_taken=taken,
        )
        .filter(pk=conversation_id, owner_id=owner_id)
        .first()
    )
    if locked is None:
        return None
    run_active, client_id_taken = (
        vars(locked).pop("run_active"),
        vars(locked).pop("client_id_taken"),
    )
    return locked, bool(run_active), bool(client_id_taken)


def branch_count_advance(
    *, branch_id: uuid.UUID, conversation_id: uuid.UUID, by: int
) -> Branch | None:
    mine = Branch.objects.filter(pk=branch_id, conversation_id=conversation_id)
    if not mine.update(message_count=F("message_count") + by):
        return None
    return mine.get()


def messages_append_write(
    *,
    messages: Sequence[Message],
    usage: Sequence[UsageDay],
    branch_count: tuple[uuid.UUID, int] | None,
    conversation_id: uuid.UUID,
    conversation_values: Mapping[str, Any],
) -> None:
    """Inside the caller's transaction and the conversation's lock, which keeps a day's
    usage row from being made twice between the update and the insert."""
    Message.objects.bulk_create(messages)
    for day in usage:
        sums = {name: getattr(day, name) for name in USAGE_SUMS}
        added = UsageDay.objects.filter(day=day.day, conversation_id=day.conversation_id).update(
            **{name: F(name) + value for name, value in sums.items()}
        )
        if not added:
            UsageDay.objects.create(
                day=day.day, owner_id=day.owner_id, conversation_id=day.conversation_id, **sums
            )
    if branch_count is not None:
        Branch.objects.filter(pk=branch_count[0]).update(message_count=branch_count[1])
    Conversation.objects.filter(pk=conversation_id).update(**conversation_values)


def run_lease_take(
    *, run_id: uuid.UUID | str, token: uuid.UUID, now: datetime, until: datetime
) -> Run | None:
    free = Q(lease_expires_at__isnull=True) | Q(lease_expires_at__lt=now)
    taken = Run.objects.filter(free, pk=run_id, status__in=Run.ACTIVE_STATUSES).update(
        status=Run.Status.IN_PROGRESS,
        lease_token=token,
        lease_expires_at=until,
        attempt=F("attempt") + 1,
        started_at=Coalesce("started_at", Value(now, output_field=DateTimeField())),
        updated_at=now,
    )
    if not taken:
        return None
    return Run.objects.select_related("conversation__owner", "branch").filter(pk=run_id).first()


def run_leases_renew(
    *, leases: Sequence[tuple[uuid.UUID, uuid.UUID]], until: datetime
) -> list[tuple[uuid.UUID, bool]]:
    if not leases:
        return []
    mine = Run.objects.filter(
        pk__in=[run_id for run_id, _ in leases], lease_token__in=[token for _, token in leases]
    )
    mine.update(lease_expires_at=until)
    rows = mine.values_list("pk", "cancel_requested_at")
    return [(run_id, asked is not None) for run_id, asked in rows]


def path_history_read(*, branch: Branch, after: int, last: int) -> list[HistoryRow]:
    """The ranges `path_history` gives the statement, as the path's queryset."""
    rows = path_messages(branch, after=after, last=last).values_list(
        "role", "content", "tool_calls", "tool_call_id", "seq", "kind", "provider_payload"
    )
    return [
        HistoryRow(
            role,
            content,
            calls,
            call_id,
            seq=seq,
            kind=kind,
            provider_payload=payload if kind == Message.Kind.COMPACTION else None,
        )
        for role, content, calls, call_id, seq, kind, payload in rows
    ]


def message_search_vector() -> SearchVector:
    """What the stored column holds, computed from the content (migration 0005)."""
    return SearchVector("content", config="english")
