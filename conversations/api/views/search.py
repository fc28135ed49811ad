"""`GET search/`: the owner's messages matching a query."""

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.request import Request
from rest_framework.response import Response

from conversations import selectors
from conversations.api import serializers as s
from conversations.api.base import ApiView, int_param, page_response
from conversations.errors import Problem, ValidationFailed


class SearchView(ApiView):
    @extend_schema(
        operation_id="search",
        summary="Search your messages",
        description='PostgreSQL: full-text search (words, "quoted phrases", -exclusions, '
        "OR), best matches first. SQLite: a case-insensitive substring match, newest first. "
        '`tag:name` or `tag:"two words"` in `q` keeps the conversations under that tag; '
        "`q` needs words to search for besides.",
        parameters=[
            OpenApiParameter("q", str, required=True),
            OpenApiParameter("limit", int, description="1..50, default 20."),
        ],
        responses=s.SearchPage,
    )
    def get(self, request: Request) -> Response:
        q = request.query_params.get("q", "")
        if not q.strip():
            raise ValidationFailed([Problem("$.query.q", "must not be empty")])
        if "\x00" in q:
            raise ValidationFailed([Problem("$.query.q", "contains a NUL character")])
        if not selectors.search_terms_parse(q).text:
            raise ValidationFailed(
                [Problem("$.query.q", "must hold words to search for besides its tag: filters")]
            )
        limit = min(int_param(request, "limit", 20, minimum=1), selectors.SEARCH_MAX)
        hits = selectors.search_hits(user=request.user, q=q, limit=limit)  # type: ignore[arg-type]
        results = [
            {
                "conversation_id": str(hit.message.conversation_id),
                "conversation_title": hit.conversation_title,
                "message_id": str(hit.message.id),
                "seq": hit.message.seq,
                "role": hit.message.role,
                "created_at": hit.message.created_at.isoformat(),
                "snippet": hit.snippet,
                "rank": hit.rank,
            }
            for hit in hits
        ]
        return page_response(request, results, None)
