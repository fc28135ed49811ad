"""The usage rollup (UsageDay): kept as messages are stored, rebuilt from them on demand.

The dashboard used to add up every message of its range on each request (3.3 s over
1,000,000 messages); it now reads one row per conversation and day. Appends move the
rows in the storing transaction, so a rolled-back message never counts and a stored one
always does. A delete leaves them: the dashboard reports spend that happened.
"""

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date
from typing import Any
from uuid import UUID

from django.db import transaction
from django.db.models import BigIntegerField, Case, Count, Q, Sum, Value, When
from django.db.models.fields.json import KeyTextTransform
from django.db.models.functions import Cast, Coalesce, TruncDate

from conversations.models import Conversation, Message, UsageDay
from conversations.validation import USAGE_COUNTS

# Conversations per rebuild transaction: their rows are replaced together, under a lock
# on those conversations so an append cannot slip between the read and the write.
REBUILD_BATCH = 1000
# A stored count is added up only as a whole number of at most 13 digits (providers'
# counts are capped at 2**40): anything else (written before counts were checked, or by
# hand) counts as not reported, so no row can make a sum fail, overflow or lie wildly.
COUNT_LIMIT = 10**13

# Told how many conversations each batch recounted (a progress bar's update).
Progress = Callable[[int], object]


def _summable(value: Any) -> int:
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < COUNT_LIMIT:
        return value
    return 0


@dataclass
class _Day:
    messages: int = 0
    user_messages: int = 0
    tokens: dict[str, int] = field(default_factory=lambda: dict.fromkeys(USAGE_COUNTS, 0))


def usage_increments(
    *, owner_id: int, conversation_id: UUID, messages: Iterable[Message]
) -> list[UsageDay]:
    """What newly stored messages of one conversation add to its rows, a day each (unsaved
    rows of the increments), for the storing transaction to add with its own writes
    (`sql.messages_append_write`).

    Only the services' append path counts, and it never stores copies; the counting
    rule is the rebuild's (`_rollup_rows`), written for Python."""
    days: dict[date, _Day] = {}
    for message in messages:
        day = days.setdefault(message.created_at.astimezone(UTC).date(), _Day())
        day.messages += 1
        day.user_messages += message.role == Message.Role.USER
        usage = message.usage if isinstance(message.usage, dict) else {}
        for name in USAGE_COUNTS:
            day.tokens[name] += _summable(usage.get(name))
    return [
        UsageDay(
            day=day_date,
            owner_id=owner_id,
            conversation_id=conversation_id,
            messages=day.messages,
            user_messages=day.user_messages,
            **day.tokens,
        )
        for day_date, day in days.items()
    ]


def _summed(name: str) -> Coalesce:
    """The sum of one usage count over the messages, each counted only when sane."""
    sane = Q(
        **{
            f"usage__{name}__gte": 0,
            f"usage__{name}__lt": COUNT_LIMIT,
            f"usage__{name}__regex": r"^[0-9]{1,13}$",
        }
    )
    count = Case(
        When(sane, then=Cast(KeyTextTransform(name, "usage"), BigIntegerField())),
        default=Value(0),
        output_field=BigIntegerField(),
    )
    return Coalesce(Sum(count), 0)


def _rollup_rows(page: Sequence[tuple[UUID, int]]) -> list[UsageDay]:
    """The rows for these `(conversation id, owner id)`, from their stored messages."""
    owners = dict(page)
    found = (
        Message.objects.filter(conversation_id__in=list(owners), copied=False)
        .annotate(day=TruncDate("created_at", tzinfo=UTC))
        .values("conversation_id", "day")
        .annotate(
            messages=Count("pk"),
            user_messages=Count("pk", filter=Q(role=Message.Role.USER)),
            **{name: _summed(name) for name in USAGE_COUNTS},
        )
        .order_by()
    )
    return [
        UsageDay(
            day=row["day"],
            owner_id=owners[row["conversation_id"]],
            conversation_id=row["conversation_id"],
            messages=row["messages"],
            user_messages=row["user_messages"],
            **{name: row[name] for name in USAGE_COUNTS},
        )
        for row in found
    ]


def usage_rebuild(*, progress: Progress | None = None) -> int:
    """Recount every existing conversation's rows from its stored messages; return how
    many conversations were recounted.

    For figures that went wrong (messages changed by hand, or stored by a process that
    predates the rollup while it was being filled). Rows of conversations deleted since
    are kept as they are: their messages are gone, and their spend still happened. Works
    a batch of conversations per transaction, each locked meanwhile, so it can run while
    people chat.
    """
    done = 0
    last: UUID | None = None
    ordered = Conversation.objects.order_by("pk").values_list("pk", "owner_id")
    while True:
        with transaction.atomic():
            batch = ordered if last is None else ordered.filter(pk__gt=last)
            page = list(batch.select_for_update()[:REBUILD_BATCH])
            if not page:
                return done
            UsageDay.objects.filter(conversation_id__in=[pk for pk, _ in page]).delete()
            UsageDay.objects.bulk_create(_rollup_rows(page), batch_size=REBUILD_BATCH)
        last = page[-1][0]
        done += len(page)
        if progress is not None:
            progress(len(page))
