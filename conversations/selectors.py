"""Every read of conversations. Each takes the requesting user, so another user's rows
can never come back: callers get "does not exist", which the API answers as 404."""

import base64
import binascii
import json
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import Any, Generic, TypeVar
from uuid import UUID

from django.conf import settings
from django.db import connection
from django.db.models import BigIntegerField, Case, Count, F, Q, QuerySet, Sum, Value, When
from django.db.models.expressions import RawSQL
from django.db.models.fields.json import KeyTextTransform
from django.db.models.functions import Cast, Coalesce, TruncDate

from accounts.models import User
from conversations import context
from conversations.context import HistoryMessage
from conversations.errors import Problem, ValidationFailed
from conversations.json_input import json_parse
from conversations.models import Conversation, Message, Run
from conversations.search import SEARCH_CONFIG

MAX_PAGE = 200
T = TypeVar("T")


@dataclass(frozen=True)
class Page(Generic[T]):
    items: list[T]
    # Opaque cursor for the next page, or None on the last page.
    next_cursor: str | None


def _clamp(limit: int) -> int:
    return max(1, min(int(limit), MAX_PAGE))


def conversation_get(*, user: User, conversation_id: UUID | str) -> Conversation:
    """The user's conversation, or Conversation.DoesNotExist (also for malformed ids)."""
    try:
        key = UUID(str(conversation_id))
    except ValueError:
        raise Conversation.DoesNotExist from None
    return Conversation.objects.get(pk=key, owner=user)


def _encode_cursor(conversation: Conversation) -> str:
    raw = json.dumps([conversation.last_activity_at.isoformat(), str(conversation.id)])
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def _decode_cursor(cursor: str) -> tuple[datetime, UUID]:
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        stamp, key = json_parse(base64.urlsafe_b64decode(padded), max_depth=2)
        when = datetime.fromisoformat(stamp)
        if when.tzinfo is None or not isinstance(key, str):
            raise ValueError("naive time or no id")
        # In UTC here: a time at the edge of the calendar would overflow in the query.
        return when.astimezone(UTC), UUID(key)
    except (ValueError, TypeError, OverflowError, binascii.Error):
        raise ValidationFailed([Problem("$.cursor", "is not a valid page cursor")]) from None


def conversation_list(
    *,
    user: User,
    archived: bool | None = False,
    q: str = "",
    cursor: str | None = None,
    limit: int = 50,
) -> Page[Conversation]:
    """The user's conversations, newest activity first, keyset-paginated on
    (last_activity_at, id) so deep pages cost the same as the first."""
    limit = _clamp(limit)
    rows = Conversation.objects.filter(owner=user)
    if archived is not None:
        rows = rows.filter(archived_at__isnull=not archived)
    if q.strip():
        rows = rows.filter(title__icontains=q.strip())
    if cursor:
        when, key = _decode_cursor(cursor)
        rows = rows.filter(Q(last_activity_at__lt=when) | Q(last_activity_at=when, id__lt=key))
    found = list(rows.order_by("-last_activity_at", "-id")[: limit + 1])
    more = len(found) > limit
    items = found[:limit]
    return Page(items=items, next_cursor=_encode_cursor(items[-1]) if more else None)


def message_page(*, conversation: Conversation, after: int = 0, limit: int = 50) -> Page[Message]:
    """Messages with seq > after, in order. The cursor is the last seq returned, so a page
    never shifts when new messages are appended."""
    limit = _clamp(limit)
    if isinstance(after, bool) or not isinstance(after, int) or after < 0:
        raise ValidationFailed([Problem("$.after", "must be a non-negative integer")])
    found = list(
        Message.objects.filter(conversation=conversation, seq__gt=after).order_by("seq")[
            : limit + 1
        ]
    )
    more = len(found) > limit
    items = found[:limit]
    return Page(items=items, next_cursor=str(items[-1].seq) if more else None)


MESSAGE_FIELDS = (
    "id",
    "conversation_id",
    "seq",
    "role",
    "kind",
    "content",
    "tool_calls",
    "tool_call_id",
    "name",
    "created_at",
    "run_id",
    "usage",
    "provider_payload",
)


def message_rows_page(
    *, conversation: Conversation, after: int = 0, limit: int = 50
) -> Page[dict[str, Any]]:
    """`message_page` as plain dicts of MESSAGE_FIELDS: a 200-message API page costs a
    third less without building a model instance per row."""
    limit = _clamp(limit)
    if isinstance(after, bool) or not isinstance(after, int) or after < 0:
        raise ValidationFailed([Problem("$.after", "must be a non-negative integer")])
    found = list(
        Message.objects.filter(conversation=conversation, seq__gt=after)
        .order_by("seq")
        .values(*MESSAGE_FIELDS)[: limit + 1]
    )
    more = len(found) > limit
    items = found[:limit]
    return Page(items=items, next_cursor=str(items[-1]["seq"]) if more else None)


def history_tail(*, conversation: Conversation, max_messages: int) -> list[HistoryMessage]:
    """The newest `max_messages` messages in seq order: one indexed range read whatever the
    conversation's length (seq > message_count - n uses the (conversation, seq) index).

    Plain tuples rather than model instances: this runs before every model call and reads
    up to a few hundred rows, where building instances costs more than the query.
    """
    first = max(0, conversation.message_count - max_messages)
    rows = (
        Message.objects.filter(conversation=conversation, seq__gt=first)
        .order_by("seq")
        .values_list("role", "content", "tool_calls", "tool_call_id")
    )
    return [
        HistoryMessage(role=role, content=content, tool_calls=tool_calls, tool_call_id=call_id)
        for role, content, tool_calls, call_id in rows
    ]


def conversation_model_input(
    *, conversation: Conversation, token_budget: int | None = None
) -> list[dict[str, Any]]:
    """What the model is sent for the next turn (see context.py for the rules)."""
    history = history_tail(
        conversation=conversation, max_messages=settings.PARLEY_CONTEXT_MAX_MESSAGES
    )
    return context.build_model_input(
        system_prompt=conversation.system_prompt,
        history=history,
        draft=conversation.draft,
        token_budget=settings.PARLEY_CONTEXT_TOKENS if token_budget is None else token_budget,
    )


def message_search(*, user: User, q: str, limit: int = 20) -> QuerySet[Message]:
    """The user's messages containing `q` (case-insensitive), newest first."""
    q = q.strip()
    if not q:
        return Message.objects.none()
    return (
        Message.objects.filter(conversation__owner=user, content__icontains=q)
        .select_related("conversation")
        .order_by("-created_at", "-seq")[: _clamp(limit)]
    )


SEARCH_MAX = 50

SNIPPET_CHARS = 160
HIGHLIGHT = ("**", "**")  # Markdown bold, since clients already render message Markdown


@dataclass(frozen=True)
class SearchHit:
    message: Message
    conversation_title: str
    # Relevance on PostgreSQL (higher is better); None with the plain match on SQLite.
    rank: float | None
    # An excerpt around the matches with each match in HIGHLIGHT marks.
    snippet: str


def search_hits(*, user: User, q: str, limit: int = 20) -> list[SearchHit]:
    """The user's messages matching `q`, best first.

    PostgreSQL: full-text search (web-search syntax: words, "phrases", -exclusions, OR) on
    the GIN-indexed `search_vector` column; the newest PARLEY_SEARCH_CANDIDATES matches
    are ranked by ts_rank, with ts_headline snippets computed only for the rows returned.
    Elsewhere: a case-insensitive substring match, newest first.
    """
    q = q.strip()
    limit = max(1, min(int(limit), SEARCH_MAX))
    if not q:
        return []
    mine = Message.objects.filter(conversation__owner=user).select_related(None)
    if connection.vendor != "postgresql":
        rows = list(
            mine.filter(content__icontains=q)
            .annotate(conversation_title=F("conversation__title"))
            .order_by("-created_at", "-seq")[:limit]
        )
        return [
            SearchHit(
                message=row,
                conversation_title=row.conversation_title,
                rank=None,
                snippet=text_snippet(row.content, q),
            )
            for row in rows
        ]

    from django.contrib.postgres.search import (
        SearchHeadline,
        SearchQuery,
        SearchRank,
        SearchVectorField,
    )

    query = SearchQuery(q, search_type="websearch", config=SEARCH_CONFIG)
    vector = RawSQL("search_vector", [], output_field=SearchVectorField())
    # Ranking reads every candidate's vector, so a common word (a tenth of all messages)
    # would cost a rank per match; the newest PARLEY_SEARCH_CANDIDATES matches are ranked
    # instead, found by walking the created_at index backwards.
    candidates = (
        mine.alias(vector=vector)
        .filter(vector=query)
        .order_by("-created_at")
        .values("pk")[: settings.PARLEY_SEARCH_CANDIDATES]
    )
    start, stop = HIGHLIGHT
    rows = list(
        Message.objects.filter(pk__in=candidates)
        .alias(vector=vector)
        .annotate(
            rank=SearchRank(vector, query),
            conversation_title=F("conversation__title"),
            snippet=SearchHeadline(
                "content",
                query,
                config=SEARCH_CONFIG,
                start_sel=start,
                stop_sel=stop,
                max_words=30,
                min_words=10,
                max_fragments=2,
                fragment_delimiter=" … ",
            ),
        )
        .order_by("-rank", "-created_at", "-seq")[:limit]
    )
    return [
        SearchHit(
            message=row,
            conversation_title=row.conversation_title,
            rank=float(row.rank),  # type: ignore[attr-defined]
            snippet=row.snippet,  # type: ignore[attr-defined]
        )
        for row in rows
    ]


def text_snippet(content: str, q: str) -> str:
    """About SNIPPET_CHARS of `content` around the first case-insensitive match of `q`,
    with the match highlighted."""
    at = content.lower().find(q.lower())
    if at < 0:
        return content[:SNIPPET_CHARS]
    room = max(0, (SNIPPET_CHARS - len(q)) // 2)
    begin, end = max(0, at - room), min(len(content), at + len(q) + room)
    start, stop = HIGHLIGHT
    text = content[begin:at] + start + content[at : at + len(q)] + stop + content[at + len(q) : end]
    return ("…" if begin else "") + text + ("…" if end < len(content) else "")


def run_active(*, conversation: Conversation) -> Run | None:
    return Run.objects.filter(conversation=conversation, status__in=Run.ACTIVE_STATUSES).first()


def run_get(*, conversation: Conversation, run_id: UUID | str) -> Run | None:
    try:
        key = UUID(str(run_id))
    except ValueError:
        return None
    return Run.objects.filter(conversation=conversation, pk=key).first()


def run_get_for_user(*, user: User, run_id: UUID | str) -> Run:
    """The run if it belongs to one of the user's conversations, else Run.DoesNotExist."""
    try:
        key = UUID(str(run_id))
    except ValueError:
        raise Run.DoesNotExist from None
    return Run.objects.select_related("conversation").get(pk=key, conversation__owner=user)


def run_exists(*, run_id: UUID | str) -> bool:
    return Run.objects.filter(pk=run_id).exists()


# --- Admin reads (moderation, usage). Callers check staff permissions first. ------------


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
