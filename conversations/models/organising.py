"""How a user keeps many conversations in order: folders (one per conversation, one level,
in the user's order) and tags (many per conversation). Pins are a flag on the
conversation itself.

Names are unique per owner whatever their case, so "Work" and "work" are one folder or
one tag: the database holds that, so two tabs creating the same name at once cannot make
two rows.
"""

import uuid
from typing import TYPE_CHECKING

from django.conf import settings
from django.db import models
from django.db.models.functions import Lower
from django.utils import timezone

if TYPE_CHECKING:
    from conversations.models.conversations import Conversation

FOLDER_NAME_MAX = 100
TAG_NAME_MAX = 64


class Folder(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="folders"
    )
    name = models.CharField(max_length=FOLDER_NAME_MAX)
    # The user's order in the sidebar, smallest first.
    position = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["position", "name"]
        constraints = [
            models.UniqueConstraint(Lower("name"), "owner", name="folder_name_unique_per_owner"),
        ]
        indexes = [models.Index(fields=["owner", "position"], name="folder_owner_position")]

    def __str__(self) -> str:
        return f"folder {str(self.pk)[:8]}"


class Tag(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="tags"
    )
    name = models.CharField(max_length=TAG_NAME_MAX)
    created_at = models.DateTimeField(default=timezone.now)
    conversations: "models.ManyToManyField[Conversation, ConversationTag]" = models.ManyToManyField(
        "conversations.Conversation", through="ConversationTag", related_name="tags"
    )

    class Meta:
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(Lower("name"), "owner", name="tag_name_unique_per_owner"),
        ]

    def __str__(self) -> str:
        return f"tag {str(self.pk)[:8]}"


class ConversationTag(models.Model):
    # Both sides go with a plain DELETE: nothing cascades from this table.
    conversation = models.ForeignKey(
        "conversations.Conversation", on_delete=models.CASCADE, related_name="+"
    )
    tag = models.ForeignKey(Tag, on_delete=models.CASCADE, related_name="+", db_index=False)

    class Meta:
        constraints = [
            # Also the index a tag filter reads: a tag's conversations without the table.
            models.UniqueConstraint(fields=["tag", "conversation"], name="conversation_tag_unique"),
        ]

    def __str__(self) -> str:
        return f"tag {self.tag_id} on {self.conversation_id}"
