"""Admin for conversations: metadata only for now.

Message text is deliberately not shown here: reading transcripts in the admin must leave
an audit trail, which the moderation work adds together with the transcript view.
"""

from django.contrib import admin
from django.http import HttpRequest

from conversations.models import AuditEvent, Conversation


@admin.register(Conversation)
class ConversationAdmin(admin.ModelAdmin):
    list_display = ["__str__", "owner", "message_count", "last_activity_at", "flagged"]
    list_select_related = ["owner"]
    list_filter = ["flagged"]
    search_fields = ["title", "owner__username"]
    show_full_result_count = False
    readonly_fields = (
        "owner",
        "title",
        "model",
        "tools",
        "metadata",
        "message_count",
        "created_at",
        "updated_at",
        "last_activity_at",
        "archived_at",
        "forked_from",
        "forked_at_seq",
    )
    fields = (*readonly_fields, "flagged", "flag_reason")


@admin.register(AuditEvent)
class AuditEventAdmin(admin.ModelAdmin):
    """Read-only for everyone, superusers included: an audit trail nobody can edit."""

    list_display = ["at", "actor_username", "action", "conversation_id", "owner_id", "reason"]
    list_filter = ["action"]
    search_fields = ["actor_username", "=conversation_id"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False
