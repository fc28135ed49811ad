"""Request and response shapes of share links (the rest: conversations/api/serializers.py)."""

from rest_framework import serializers

from conversations.api.serializers import MessageOut, page_of
from conversations.api.strict import StrictChoiceField, StrictSerializer
from conversations.models import ShareAudience


class ShareIn(StrictSerializer):
    audience = StrictChoiceField(
        choices=ShareAudience.choices,
        required=False,
        help_text="`public` (default): anyone holding the link; `signed_in`: signed-in users "
        "holding it.",
    )
    expires_at = serializers.DateTimeField(
        required=False, allow_null=True, help_text="A future time; none: the link never expires."
    )


class ShareOut(serializers.Serializer):
    id = serializers.UUIDField()
    url = serializers.CharField(
        allow_null=True, help_text="`/s/<token>/`: only in the answer that creates the share."
    )
    audience = serializers.ChoiceField(choices=ShareAudience.choices)
    expires_at = serializers.DateTimeField(allow_null=True)
    revoked_at = serializers.DateTimeField(allow_null=True)
    created_at = serializers.DateTimeField()
    conversation_id = serializers.UUIDField()
    message_count = serializers.IntegerField(help_text="Messages in the snapshot.")
    view_count = serializers.IntegerField()


class SharedMessageOut(MessageOut):
    """A message as its owner's API answers it, less the owner's own records."""

    conversation_id = None  # type: ignore[assignment]
    branch_id = None  # type: ignore[assignment]
    run_id = None  # type: ignore[assignment]
    usage = None  # type: ignore[assignment]
    provider_payload = None  # type: ignore[assignment]
    alternatives = None  # type: ignore[assignment]


class SharedOut(serializers.Serializer):
    title = serializers.CharField()
    created_at = serializers.DateTimeField(help_text="When the link was made.")
    messages = SharedMessageOut(many=True)


SharePage = page_of(ShareOut, "SharePage")
