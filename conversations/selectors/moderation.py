"""Reads for the admin (moderation, usage). Callers check staff permissions first."""

from dataclasses import dataclass
from datetime import date, timedelta
from typing import Any
from uuid import UUID

from django.db.models import BooleanField, Count, ExpressionWrapper, F, Q, QuerySet, Sum

from conversations.models import Branch, Conversation, Message, StoredFile, UsageDay
from conversations.selectors.attachments import attachment_files
from conversations.selectors.branches import (
    BRANCH_FIELDS,
    alternatives_at,
    branch_get,
    path_messages,
)


@dataclass(frozen=True)
class TranscriptLine:
    message: Message
    # {"index" (0-based), "count", "branch_ids"} where the message has other versions.
    alternatives: dict[str, Any] | None
    # The files the message carries, in order.
    files: list[StoredFile]


@dataclass(frozen=True)
class TranscriptPage:
    messages: list[Message]
    number: int
    pages: int
    # The branch whose path is shown, and whether the conversation shows it too.
    branch: Branch
    active: bool
    lines: list[TranscriptLine]


def transcript_page(
    *,
    conversation: Conversation,
    page: int,
    per_page: int,
    branch_id: UUID | str | None = None,
) -> TranscriptPage:
    """Page `page` (from 1) of one branch's path (the active branch's by default;
    Branch.DoesNotExist for an id that is not one of this conversation's branches).

    seq is gapless from 1 along a path, so page n is exactly the seq range
    ((n-1)*per_page, n*per_page]: one indexed read per segment of the path however long
    it is, the page count from the branch's path length (not a COUNT, and not the
    conversation's message_count, which counts every branch), the alternatives of the
    whole page in one more query (none for a conversation of one branch) and the page's
    files in one more."""
    branch = branch_get(conversation=conversation, branch_id=branch_id)
    pages = max(1, -(-branch.message_count // per_page))
    number = min(max(1, page), pages)
    first = (number - 1) * per_page
    messages = list(path_messages(branch, after=first, last=first + per_page))
    choices = alternatives_at(
        branch, [m.seq for m in messages], branch_count=conversation.branch_count
    )
    files = attachment_files(message_ids=[m.pk for m in messages])
    return TranscriptPage(
        messages=messages,
        number=number,
        pages=pages,
        branch=branch,
        active=branch.pk == conversation.active_branch_id,
        lines=[TranscriptLine(m, choices.get(m.seq), files.get(m.pk, [])) for m in messages],
    )


def branches_table(*, conversation: Conversation, limit: int) -> list[dict[str, Any]]:
    """The conversation's first `limit` branches for the admin's detail page, the root
    first, then by age: BRANCH_FIELDS and `own_messages` (`conversation.branch_count`
    says how many exist, so no COUNT is needed). Ordered in the database, so a
    conversation regenerated thousands of times costs one bounded read."""
    is_fork = ExpressionWrapper(Q(parent__isnull=False), output_field=BooleanField())
    rows = (
        Branch.objects.filter(conversation=conversation)
        .annotate(is_fork=is_fork, own_messages=F("message_count") - F("fork_seq"))
        .order_by("is_fork", "created_at", "id")
        .values(*BRANCH_FIELDS, "own_messages")[:limit]
    )
    return list(rows)


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


@dataclass(frozen=True)
class UserStorage:
    user_id: int
    username: str
    files: int
    stored_bytes: int


# What the storage table may be ordered by, heaviest first; ties by the other figure.
STORAGE_ORDERS = {
    "bytes": ("-stored_bytes", "-files", "owner_id"),
    "files": ("-files", "-stored_bytes", "owner_id"),
}


def storage_by_user(*, order: str = "bytes", limit: int = 50) -> list[UserStorage]:
    """The users storing the most (bytes, or files when `order` is "files"), with their
    file count and bytes: one aggregate query. Every stored file counts, attached or not,
    as it does against the per-user quota."""
    rows = (
        StoredFile.objects.values("owner_id", "owner__username")
        .annotate(files=Count("id"), stored_bytes=Sum("size"))
        .order_by(*STORAGE_ORDERS.get(order, STORAGE_ORDERS["bytes"]))[:limit]
    )
    return [
        UserStorage(
            user_id=row["owner_id"],
            username=row["owner__username"],
            files=row["files"],
            stored_bytes=row["stored_bytes"],
        )
        for row in rows
    ]
