"""Full-text search over message content on PostgreSQL, a substring match elsewhere."""

from django.contrib.postgres.search import SearchQuery, SearchVectorField
from django.db import connection
from django.db.models import QuerySet
from django.db.models.expressions import RawSQL

from conversations.models import Message

# The same configuration as the stored `search_vector` column (migration 0005).
SEARCH_CONFIG = "english"


def messages_matching(queryset: QuerySet[Message], text: str) -> QuerySet[Message]:
    """Messages whose content matches `text` (web-search syntax on PostgreSQL, through the
    GIN-indexed `search_vector` column; a case-insensitive substring elsewhere)."""
    text = text.strip()
    if not text:
        return queryset
    if connection.vendor != "postgresql":
        return queryset.filter(content__icontains=text)
    query = SearchQuery(text, config=SEARCH_CONFIG, search_type="websearch")
    vector = RawSQL("conversations_message.search_vector", [], output_field=SearchVectorField())
    return queryset.alias(fts=vector).filter(fts=query)
