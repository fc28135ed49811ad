"""`api-keys/`: the caller's own API keys: list, create (the secret shown once), revoke.

Every method needs the `keys` scope (a session or a password holds it). A key creates keys
with at most its own scopes and revokes only keys whose scopes it holds; the keys it
creates are revoked with it."""

from drf_spectacular.utils import OpenApiExample, extend_schema
from rest_framework import authentication
from rest_framework.request import Request
from rest_framework.response import Response

from accounts import selectors as account_selectors
from accounts import services as account_services
from accounts.authentication import ApiKeyAuthentication, PasswordAuthentication
from accounts.models import ApiKey
from accounts.permissions import request_key
from accounts.scopes import KEYS
from conversations.api import key_serializers as ks
from conversations.api.base import ApiView, idempotent, page_response, valid_body
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
        "scopes": list(api_key.scopes),
        "created_by_key_id": str(api_key.created_by_key_id) if api_key.created_by_key_id else None,
    }


class ApiKeyListView(ApiView):
    required_scope = KEYS
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
        operation_id="api_keys_list", summary="List your API keys", responses=ks.ApiKeyPage
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
        "stored, so it cannot be shown again; create another key if it was lost. "
        "`scopes` defaults to `chat` and `read` (as far as the caller holds them); a key "
        "asking for a scope it does not hold itself is refused with 403 "
        "`insufficient_scope`, and the new key is revoked whenever the key that created it "
        "is.",
        request=ks.ApiKeyIn,
        responses={201: ks.ApiKeyCreatedOut},
        examples=[
            OpenApiExample("Create", value={"name": "ci"}, request_only=True),
            OpenApiExample(
                "Read-only", value={"name": "dashboard", "scopes": ["read"]}, request_only=True
            ),
        ],
    )
    @idempotent
    def post(self, request: Request) -> Response:
        data = valid_body(ks.ApiKeyIn, request)
        try:
            api_key, secret = account_services.api_key_create(
                owner=request.user,  # type: ignore[arg-type]
                name=data["name"],
                scopes=data.get("scopes"),
                created_by=request_key(request),
            )
        except account_services.ScopesInvalid as exc:
            raise ValidationFailed([Problem("$.scopes", str(exc))]) from None
        except ValueError as exc:
            raise ValidationFailed([Problem("$.name", str(exc))]) from None
        return Response({**_key(api_key), "key": secret}, status=201)


class ApiKeyDetailView(ApiView):
    required_scope = KEYS

    @extend_schema(
        operation_id="api_keys_revoke",
        summary="Revoke an API key",
        description="Refused from the next request on, with every key it created (and "
        "theirs); their sockets and streams close. Revoking twice changes nothing. A key "
        "may revoke only keys whose scopes it holds all of (else 403 `insufficient_scope`).",
        responses={204: None},
    )
    def delete(self, request: Request, key_id: str) -> Response:
        api_key = account_selectors.api_key_get(owner=request.user, key_id=key_id)  # type: ignore[arg-type]
        account_services.api_key_revoke(api_key=api_key, revoked_by=request_key(request))
        return Response(status=204)
