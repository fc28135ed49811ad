"""`api-keys/`: the caller's own API keys: list, create (the secret shown once), revoke."""

from drf_spectacular.utils import OpenApiExample, extend_schema
from rest_framework import authentication
from rest_framework.request import Request
from rest_framework.response import Response

from accounts import selectors as account_selectors
from accounts import services as account_services
from accounts.authentication import ApiKeyAuthentication, PasswordAuthentication
from accounts.models import ApiKey
from conversations.api import serializers as s
from conversations.api.base import ApiView, idempotent, page_response
from conversations.errors import Problem, ValidationFailed


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
