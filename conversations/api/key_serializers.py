"""Request and response shapes of `api-keys/` (the rest: conversations/api/serializers.py)."""

from rest_framework import serializers

from accounts.models import Scope
from conversations.api.serializers import page_of
from conversations.api.strict import StrictCharField, StrictChoiceField, StrictSerializer

_SCOPES_HELP = (
    "`read`: every read; `chat`: every write and model call, with `read`; `keys`: manage API keys."
)


class ApiKeyIn(StrictSerializer):
    name = StrictCharField(max_length=100)
    scopes = serializers.ListField(
        child=StrictChoiceField(choices=Scope.choices),
        required=False,
        allow_empty=False,
        help_text=f"{_SCOPES_HELP} Default `chat` and `read`, as far as the caller holds them; "
        "a key grants only scopes it holds (else 403 `insufficient_scope`).",
    )


class ApiKeyOut(serializers.Serializer):
    id = serializers.UUIDField()
    name = serializers.CharField()
    prefix = serializers.CharField()
    created_at = serializers.DateTimeField()
    last_used_at = serializers.DateTimeField(allow_null=True)
    revoked_at = serializers.DateTimeField(allow_null=True)
    scopes = serializers.ListField(
        child=serializers.ChoiceField(choices=Scope.choices), help_text=_SCOPES_HELP
    )
    created_by_key_id = serializers.UUIDField(
        allow_null=True, help_text="The key that created this one; revoking it revokes this."
    )


class ApiKeyCreatedOut(ApiKeyOut):
    key = serializers.CharField(
        allow_null=True,
        help_text="The whole secret. Shown this once, never again: null in a repeat of the "
        "request with the same Idempotency-Key.",
    )


ApiKeyPage = page_of(ApiKeyOut, "ApiKeyPage")
