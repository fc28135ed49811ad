"""Search, the tool catalog and API keys."""

from drf_spectacular.utils import OpenApiExample, OpenApiParameter, extend_schema
from rest_framework import authentication
from rest_framework.request import Request
from rest_framework.response import Response

from accounts import selectors as account_selectors
from accounts import services as account_services
from accounts.authentication import ApiKeyAuthentication, PasswordAuthentication
from accounts.models import ApiKey
from conversations import selectors
from conversations.api import serializers as s
from conversations.api.base import ApiView, idempotent, int_param, page_response
from conversations.errors import Problem, ValidationFailed
from conversations.tools.registry import tool_catalog


class SearchView(ApiView):
    @extend_schema(
        operation_id="search",
        summary="Search your messages",
        description='PostgreSQL: full-text search (words, "quoted phrases", -exclusions, '
        "OR), best matches first. SQLite: a case-insensitive substring match, newest first.",
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


class ToolListView(ApiView):
    @extend_schema(
        operation_id="tools_list", summary="Tools the model can use", responses=s.ToolPage
    )
    def get(self, request: Request) -> Response:
        return page_response(request, tool_catalog(), None)


def _key(api_key: ApiKey) -> dict[str, object]:
    def when(value: object) -> str | None:
        return value.isoformat() if value else None  # type: ignore[attr-defined]

    return {
        "id": str(api_key.id),
        "name": api_key.name,
        "prefix": api_key.prefix,
        "created_at": when(api_key.created_at),
        "last_used_at": when(api_key.last_used_at),
        "revoked_at": when(api_key.revoked_at),
    }


class ApiKeyListView(ApiView):
    # Also username and password here (only here): a program's first key can then be made
    # with plain curl, without a browser session. Everywhere else takes the key itself.
    authentication_classes = [
        ApiKeyAuthentication,
        authentication.SessionAuthentication,
        PasswordAuthentication,
    ]
    # The secret is shown once: a repeat with the same Idempotency-Key answers the same
    # key with `key: null` (and `Idempotent-Withheld: key`), even after a revocation.
    idempotency_withheld = ("key",)

    @extend_schema(
        operation_id="api_keys_list", summary="List your API keys", responses=s.ApiKeyPage
    )
    def get(self, request: Request) -> Response:
        keys = account_selectors.api_key_list(owner=request.user)  # type: ignore[arg-type]
        return page_response(request, [_key(k) for k in keys], None)

    @extend_schema(
        operation_id="api_keys_create",
        summary="Create an API key",
        description="The answer's `key` is the whole secret, shown this once; only its "
        "hash is stored. Send it as `Authorization: Bearer <key>`. A repeat with the same "
        "`Idempotency-Key` answers the key as it was created, with `key: null` and the header "
        "`Idempotent-Withheld: key`, even after the key was revoked: the secret is never "
        "stored, so it cannot be shown again; create another key if it was lost.",
        request=s.ApiKeyIn,
        responses={201: s.ApiKeyCreatedOut},
        examples=[OpenApiExample("Create", value={"name": "ci"}, request_only=True)],
    )
    @idempotent
    def post(self, request: Request) -> Response:
        serializer = s.ApiKeyIn(data=request.data)
        serializer.is_valid(raise_exception=True)
        try:
            api_key, secret = account_services.api_key_create(
                owner=request.user,  # type: ignore[arg-type]
                name=serializer.validated_data["name"],
            )
        except ValueError as exc:
            raise ValidationFailed([Problem("$.name", str(exc))]) from None
        return Response({**_key(api_key), "key": secret}, status=201)


class ApiKeyDetailView(ApiView):
    @extend_schema(
        operation_id="api_keys_revoke",
        summary="Revoke an API key",
        description="Refused from the next request on. Revoking twice changes nothing.",
        responses={204: None},
    )
    def delete(self, request: Request, key_id: str) -> Response:
        api_key = account_selectors.api_key_get(owner=request.user, key_id=key_id)  # type: ignore[arg-type]
        account_services.api_key_revoke(api_key=api_key)
        return Response(status=204)
