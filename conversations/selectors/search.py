"""Search over message content: one matching rule for every caller (the API, the
model's search tool, the admin) and one snippet function.

PostgreSQL: full-text search (web-search syntax: words, "phrases", -exclusions, OR) on
the GIN-indexed `search_vector` column. Elsewhere: a case-insensitive substring match.
`tag:name` and `tag:"two words"` in a query restrict it to conversations under that tag,
here and in the conversation list (one parser, `search_terms_parse`).
"""

import re
from dataclasses import dataclass
from typing import Literal

from django.conf import settings
from django.contrib.postgres.search import SearchHeadline, SearchQuery, SearchRank
from django.db import connection
from django.db.models import F, QuerySet

from accounts.models import User
from conversations import sql
from conversations.models import Message
from conversations.selectors.organising import names_unique, tagged_filter

# The same configuration as the stored `search_vector` column (migration 0005).
SEARCH_CONFIG = "english"

# A tag filter: `tag:` (any case) at a word's start, then a quoted name or one word.
_TAG_TERM = re.compile(r'(?<!\S)tag:(?:"([^"]*)"|(\S+))', re.IGNORECASE)


@dataclass(frozen=True)
class SearchTerms:
    # What is left to match as text (stripped; empty when the query held only tags).
    text: str
    # The tags a match must be under, each name once whatever its case.
    tags: tuple[str, ...]


def search_terms_parse(q: str) -> SearchTerms:
    """`q` split into its `tag:` filters and the text around them."""
    found: list[str] = []

    def take(match: re.Match[str]) -> str:
        quoted, word = match.groups()
        found.append(quoted if quoted is not None else word)
        return " "

    text = _TAG_TERM.sub(take, q)
    if not found:
        return SearchTerms(text=q.strip(), tags=())
    return SearchTerms(text=" ".join(text.split()), tags=tuple(names_unique(found)))


def _query(text: str) -> SearchQuery:
    return SearchQuery(text, config=SEARCH_CONFIG, search_type="websearch")


def messages_matching(queryset: QuerySet[Message], text: str) -> QuerySet[Message]:
    """Messages whose content matches `text` (web-search syntax on PostgreSQL, through the
    GIN-indexed `search_vector` column; a case-insensitive substring elsewhere)."""
    text = text.strip()
    if not text:
        return queryset
    if connection.vendor != "postgresql":
        return queryset.filter(content__icontains=text)
    return queryset.alias(fts=sql.message_search_vector()).filter(fts=_query(text))


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


def search_hits(
    *, user: User, q: str, limit: int = 20, order: Literal["relevance", "newest"] = "relevance"
) -> list[SearchHit]:
    """The user's messages matching `q` (`messages_matching`), best first or newest first,
    in the conversations under each of its `tag:` filters; nothing without any text.

    By relevance on PostgreSQL, the newest PARLEY_SEARCH_CANDIDATES matches are ranked by
    ts_rank, with ts_headline snippets computed only for the rows returned. Otherwise
    (SQLite, or newest first) each row's snippet comes from `text_snippet`.
    """
    terms = search_terms_parse(q)
    q = terms.text
    limit = max(1, min(int(limit), SEARCH_MAX))
    if not q:
        return []
    # Not the messages of an import still storing its conversation, which is hidden.
    mine = Message.objects.filter(conversation__owner=user, conversation__import_started_at=None)
    under = tagged_filter(user=user, names=terms.tags, field="conversation_id")
    if under is None:
        return []
    mine = mine.filter(under)
    matching = messages_matching(mine.select_related(None), q)
    if connection.vendor != "postgresql" or order == "newest":
        rows = list(
            matching.annotate(conversation_title=F("conversation__title")).order_by(
                "-created_at", "-seq"
            )[:limit]
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

    # Ranking reads every candidate's vector, so a common word (a tenth of all messages)
    # would cost a rank per match; the newest PARLEY_SEARCH_CANDIDATES matches are ranked
    # instead, found by walking the created_at index backwards.
    # Read as a list of ids first: the search column (`sql.message_search_vector`) names
    # the table, which inside a subquery would be the outer query's row (Django aliases
    # the inner table), matching the wrong rows and running the subquery once per match.
    candidates = list(
        matching.order_by("-created_at").values_list("pk", flat=True)[
            : settings.PARLEY_SEARCH_CANDIDATES
        ]
    )
    if not candidates:
        return []
    query = _query(q)
    start, stop = HIGHLIGHT
    rows = list(
        Message.objects.filter(pk__in=candidates)
        .annotate(
            rank=SearchRank(sql.message_search_vector(), query),
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
