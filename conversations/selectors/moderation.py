"""Reads for the admin (moderation, usage). Callers check staff permissions first."""

from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta

from django.db.models import BigIntegerField, Case, Count, Q, QuerySet, Sum, Value, When
from django.db.models.fields.json import KeyTextTransform
from django.db.models.functions import Cast, Coalesce, TruncDate

from conversations.models import Conversation, Message


@dataclass(frozen=True)
class TranscriptPage:
    messages: list[Message]
    number: int
    pages: int


def transcript_page(*, conversation: Conversation, page: int, per_page: int) -> TranscriptPage:
    """Page `page` (from 1) of a conversation's messages. seq is gapless from 1, so page n
    is exactly the seq range ((n-1)*per_page, n*per_page]: one index range read however
    long the conversation, and the page count comes from message_count, not a COUNT."""
    pages = max(1, -(-conversation.message_count // per_page))
    number = min(max(1, page), pages)
    first = (number - 1) * per_page
    messages = list(
        Message.objects.filter(
            conversation=conversation, seq__gt=first, seq__lte=first + per_page
        ).order_by("seq")
    )
    return TranscriptPage(messages=messages, number=number, pages=pages)


# A stored count the usage figures add up: a JSON number (the range test leaves out
# strings, objects and arrays, which JSON orders apart from numbers) written as at most
# 13 digits (providers' counts are capped at 2**40). Anything else (written before counts
# were checked, or by hand) counts as not reported, so no row can make a sum fail,
# overflow or lie wildly.
_SUMMABLE_COUNT = Q(
    usage__total_tokens__gte=0,
    usage__total_tokens__lt=10**13,
    usage__total_tokens__regex=r"^[0-9]{1,13}$",
)


def _tokens() -> Coalesce:
    total = Case(
        When(
            _SUMMABLE_COUNT,
            then=Cast(KeyTextTransform("total_tokens", "usage"), BigIntegerField()),
        ),
        default=Value(0),
        output_field=BigIntegerField(),
    )
    return Coalesce(Sum(total), 0)


def _usage_messages(start: date, end: date) -> QuerySet[Message]:
    """Messages created on days start..end (inclusive, UTC)."""
    since = datetime.combine(start, time.min, tzinfo=UTC)
    until = datetime.combine(end + timedelta(days=1), time.min, tzinfo=UTC)
    # Copies (imports, forks) were spent elsewhere: counting them would let anyone forge
    # their own figures, or count a fork's history twice.
    return Message.objects.filter(created_at__gte=since, created_at__lt=until, copied=False)


@dataclass(frozen=True)
class DayUsage:
    day: date
    messages: int
    user_messages: int
    tokens: int


def usage_by_day(*, start: date, end: date) -> list[DayUsage]:
    """Messages and tokens per day over the range, every day present (zeros included).
    Tokens are the providers' `total_tokens` stored on each assistant message."""
    found = {
        row["day"]: row
        for row in _usage_messages(start, end)
        .annotate(day=TruncDate("created_at"))
        .values("day")
        .annotate(
            messages=Count("pk"),
            user_messages=Count("pk", filter=Q(role=Message.Role.USER)),
            tokens=_tokens(),
        )
        .order_by()
    }
    days = []
    for offset in range((end - start).days + 1):
        day = start + timedelta(days=offset)
        row = found.get(day, {})
        days.append(
            DayUsage(
                day=day,
                messages=row.get("messages", 0),
                user_messages=row.get("user_messages", 0),
                tokens=row.get("tokens", 0),
            )
        )
    return days


@dataclass(frozen=True)
class UserUsage:
    user_id: int
    username: str
    conversations: int
    messages: int
    user_messages: int
    tokens: int


def usage_by_user(*, start: date, end: date, offset: int = 0, limit: int = 50) -> list[UserUsage]:
    """Users by tokens used over the range (then by messages), heaviest first."""
    rows = (
        _usage_messages(start, end)
        .values("conversation__owner_id", "conversation__owner__username")
        .annotate(
            conversations=Count("conversation_id", distinct=True),
            messages=Count("pk"),
            user_messages=Count("pk", filter=Q(role=Message.Role.USER)),
            tokens=_tokens(),
        )
        .order_by("-tokens", "-messages", "conversation__owner_id")[offset : offset + limit]
    )
    return [
        UserUsage(
            user_id=row["conversation__owner_id"],
            username=row["conversation__owner__username"],
            conversations=row["conversations"],
            messages=row["messages"],
            user_messages=row["user_messages"],
            tokens=row["tokens"],
        )
        for row in rows
    ]
