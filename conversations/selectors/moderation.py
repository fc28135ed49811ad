"""Reads for the admin (moderation, usage). Callers check staff permissions first."""

from dataclasses import dataclass
from datetime import date, timedelta

from django.db.models import Count, QuerySet, Sum

from conversations.models import Conversation, Message, UsageDay


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


def _usage_days(start: date, end: date) -> QuerySet[UsageDay]:
    """The rollup's rows for days start..end (inclusive, UTC): one per conversation and
    day, kept as messages are stored (services/usage.py), so a month is a few thousand
    rows however many messages it held. Copies (imports, forks) are not in it: they were
    spent elsewhere, and counting them would let anyone forge their own figures."""
    return UsageDay.objects.filter(day__gte=start, day__lte=end)


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
        for row in _usage_days(start, end)
        .values("day")
        .annotate(
            messages=Sum("messages"),
            user_messages=Sum("user_messages"),
            tokens=Sum("total_tokens"),
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
    """Users by tokens used over the range (then by messages), heaviest first. Deleted
    accounts are left out here; their usage stays in the daily figures."""
    rows = (
        _usage_days(start, end)
        .filter(owner__isnull=False)
        .values("owner_id", "owner__username")
        .annotate(
            conversations=Count("conversation_id", distinct=True),
            messages=Sum("messages"),
            user_messages=Sum("user_messages"),
            tokens=Sum("total_tokens"),
        )
        .order_by("-tokens", "-messages", "owner_id")[offset : offset + limit]
    )
    return [
        UserUsage(
            user_id=row["owner_id"],
            username=row["owner__username"],
            conversations=row["conversations"],
            messages=row["messages"],
            user_messages=row["user_messages"],
            tokens=row["tokens"],
        )
        for row in rows
    ]
