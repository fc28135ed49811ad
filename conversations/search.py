"""Full-text search over message content on PostgreSQL, a substring match elsewhere."""

from django.contrib.postgres.search import SearchQuery, SearchVectorField
from django.db import connection
from django.db.models import F, Func, QuerySet

from conversations.models import Message


class ContentVector(Func):
    """`to_tsvector('simple', content)`: the exact expression of the message_content_fts
    GIN index (migration 0004), so the planner answers searches from the index. The
    'simple' configuration does no stemming, which suits text in any language."""

    template = "to_tsvector('simple'::regconfig, %(expressions)s)"
    output_field = SearchVectorField()


def messages_matching(queryset: QuerySet[Message], text: str) -> QuerySet[Message]:
    text = text.strip()
    if not text:
        return queryset
    if connection.vendor != "postgresql":
        return queryset.filter(content__icontains=text)
    query = SearchQuery(text, config="simple", search_type="websearch")
    return queryset.alias(fts=ContentVector(F("content"))).filter(fts=query)
