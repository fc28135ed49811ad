"""The shapes of organising: a conversation's pin, folder and tags (in its PATCH and its
payload), `folders/` and `tags/` (the rest: conversations/api/serializers.py)."""

from rest_framework import serializers

from conversations.api.strict import (
    StrictBooleanField,
    StrictCharField,
    StrictIntegerField,
    StrictSerializer,
    StrictUUIDField,
)
from conversations.models.organising import FOLDER_NAME_MAX, TAG_NAME_MAX

_POSITION = "Its place in your order, from 0; past the end is the end."


class OrganisingIn(StrictSerializer):
    """What `PATCH conversations/{id}/` takes besides the settings."""

    pinned = StrictBooleanField(required=False, help_text="Pinned ones come first in lists.")
    folder_id = StrictUUIDField(
        required=False,
        allow_null=True,
        help_text="One of your `folders/`, or null for none; another's or an unknown id is a 404.",
    )
    tags = serializers.ListField(
        child=StrictCharField(trim_whitespace=False, allow_blank=True),
        required=False,
        help_text=f"The whole list of its tags by name, any case: an existing tag keeps its "
        f"spelling, a new one is made, the same name twice counts once. Names are 1 to "
        f"{TAG_NAME_MAX} characters once stripped, on one line; at most "
        "PARLEY_MAX_TAGS_PER_CONVERSATION (20) a conversation, PARLEY_MAX_TAGS (500) a user.",
    )


class OrganisedOut(serializers.Serializer):
    """What a conversation's payload says of how it is organised."""

    pinned = serializers.BooleanField()
    folder_id = serializers.UUIDField(allow_null=True, help_text="Its folder, if any.")
    tags = serializers.ListField(
        child=serializers.CharField(), help_text="Its tags' names, sorted whatever their case."
    )


def _folder_name(*, required: bool) -> StrictCharField:
    return StrictCharField(
        trim_whitespace=False,
        allow_blank=True,
        required=required,
        help_text=f"1 to {FOLDER_NAME_MAX} characters once stripped, on one line; unique "
        "among your folders whatever its case.",
    )


class FolderIn(StrictSerializer):
    name = _folder_name(required=True)
    position = StrictIntegerField(required=False, allow_null=True, min_value=0, help_text=_POSITION)


class FolderUpdateIn(StrictSerializer):
    name = _folder_name(required=False)
    position = StrictIntegerField(required=False, min_value=0, help_text=_POSITION)


class FolderOut(serializers.Serializer):
    id = serializers.UUIDField()
    name = serializers.CharField()
    position = serializers.IntegerField(min_value=0)
    conversation_count = serializers.IntegerField(
        min_value=0, help_text="Your conversations in it, archived ones included."
    )
    created_at = serializers.DateTimeField()


class TagOut(serializers.Serializer):
    name = serializers.CharField()
    count = serializers.IntegerField(
        min_value=1, help_text="Your conversations under it, archived ones included."
    )
