"""Share links: a read-only snapshot of a conversation's active path, opened by whoever
holds its link (or, for `signed_in`, any signed-in user holding it).

The link's token is in the URL only: the row keeps its SHA-256, so a database dump opens
no share. A share is a snapshot: the branch that was active and the seq of its last
message when it was shared; later messages, edits and branch switches do not show.
"""

import uuid

from django.conf import settings
from django.db import models
from django.db.models import Q


class ShareAudience(models.TextChoices):
    PUBLIC = "public"
    SIGNED_IN = "signed_in"


class Share(models.Model):
    Audience = ShareAudience

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    conversation = models.ForeignKey(
        "conversations.Conversation", on_delete=models.CASCADE, related_name="shares"
    )
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+"
    )
    # SHA-256 hex of the token.
    token_hash = models.CharField(max_length=64, unique=True)
    audience = models.CharField(
        max_length=16, choices=ShareAudience.choices, default=ShareAudience.PUBLIC
    )
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    # The snapshot: the branch that was active and its message count at share time.
    # Branches go only with their conversation, which takes its shares with it: nothing
    # to cascade here (as for messages), so a delete stays one statement per table.
    branch = models.ForeignKey(
        "conversations.Branch", on_delete=models.DO_NOTHING, related_name="+", db_index=False
    )
    message_count = models.PositiveIntegerField()
    view_count = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.CheckConstraint(
                condition=Q(audience__in=ShareAudience.values), name="share_audience_valid"
            ),
        ]
        indexes = [models.Index(fields=["conversation", "-created_at"], name="share_by_conv")]

    def __str__(self) -> str:
        return f"share {self.pk} of {self.conversation_id}"
