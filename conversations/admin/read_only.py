"""Read-only admins for messages, runs and the audit trail."""

import uuid
from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse

from conversations import services
from conversations.admin.common import actor, can_read_transcripts, conversation_link
from conversations.admin.paging import EstimatedCountPaginator
from conversations.admin.text_guard import TextGuardMixin
from conversations.engine import run_cancel
from conversations.models import AuditEvent, Message, Run
from conversations.selectors import search

# Fields holding what people and models wrote: shown only with the transcript permission.
MESSAGE_TEXT_FIELDS = ("content", "reasoning", "tool_calls", "provider_payload")
MESSAGE_META_FIELDS = (
    "id",
    "conversation",
    "seq",
    "role",
    "kind",
    "name",
    "tool_call_id",
    "run",
    "usage",
    "reasoning_ms",
    "created_at",
)


class ReadOnlyAdmin(TextGuardMixin, admin.ModelAdmin):
    paginator = EstimatedCountPaginator
    show_full_result_count = False
    list_per_page = 100

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


def uuid_or_none(term: str) -> uuid.UUID | None:
    """The id a search term is, or None."""
    try:
        return uuid.UUID(term.strip())
    except ValueError:
        return None


class ListActionsAdmin(ReadOnlyAdmin):
    """Read-only rows of a conversation with actions on the list (which need "change";
    the detail page stays read-only), found by their own id or their conversation's."""

    search_fields = ["=id", "=conversation__id"]

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return obj is None and admin.ModelAdmin.has_change_permission(self, request)

    def search_results(
        self, request: HttpRequest, queryset: QuerySet[Any], search_term: str
    ) -> tuple[QuerySet[Any], bool]:
        term = search_term.strip()
        if not term:
            return queryset, False
        key = uuid_or_none(term)
        if key is None:
            return queryset.none(), False
        return queryset.filter(pk=key) | queryset.filter(conversation_id=key), False


@admin.register(Message)
class MessageAdmin(ReadOnlyAdmin):
    """Message metadata for everyone with the view permission. Text (content, tool calls)
    and text search need the transcript permission; opening a message with it is audited
    like a transcript page."""

    list_display = ["seq", "role", "kind", "conversation_link", "name", "created_at", "run_id"]
    list_filter = ["role", "kind"]
    search_fields = ["content"]
    search_reads_text = True
    raw_id_fields = ["conversation", "run"]

    def get_search_fields(self, request: HttpRequest) -> list[str]:
        return ["content"] if can_read_transcripts(request) else ["=conversation__id"]

    def search_results(
        self, request: HttpRequest, queryset: QuerySet[Message], search_term: str
    ) -> tuple[QuerySet[Message], bool]:
        term = search_term.strip()
        if not term:
            return queryset, False
        key = uuid_or_none(term)
        if key is not None:
            return queryset.filter(conversation_id=key) | queryset.filter(pk=key), False
        if not can_read_transcripts(request):
            # Matching text would reveal it one query at a time.
            return queryset.none(), False
        return search.messages_matching(queryset, term), False

    def get_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        if can_read_transcripts(request):
            return [*MESSAGE_META_FIELDS, *MESSAGE_TEXT_FIELDS]
        return list(MESSAGE_META_FIELDS)

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return self.get_fields(request, obj)

    @admin.display(description="conversation", ordering="conversation")
    def conversation_link(self, obj: Message) -> str:
        return conversation_link(obj.conversation_id)

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        response = super().change_view(request, object_id, form_url, extra_context)
        if response.status_code == 200 and can_read_transcripts(request):
            message = Message.objects.select_related("conversation").filter(pk=object_id).first()
            if message is not None:
                services.audit_record(
                    actor=actor(request),
                    action=AuditEvent.Action.VIEWED,
                    conversation=message.conversation,
                    reason=f"message #{message.seq}",
                )
        return response


@admin.action(description="Cancel selected runs", permissions=["change"])
def cancel_runs(
    modeladmin: admin.ModelAdmin, request: HttpRequest, queryset: QuerySet[Run]
) -> None:
    cancelled = 0
    for run in queryset.filter(status__in=Run.ACTIVE_STATUSES):
        run_cancel(run=run)
        cancelled += 1
    if cancelled:
        modeladmin.message_user(request, f"Asked {cancelled} run(s) to stop.", messages.SUCCESS)
    else:
        modeladmin.message_user(request, "None of the selected runs was active.", messages.WARNING)


@admin.register(Run)
class RunAdmin(ListActionsAdmin):
    list_display = [
        "id",
        "conversation_link",
        "status",
        "model",
        "iterations",
        "total_tokens",
        "error_code",
        "created_at",
        "finished_at",
    ]
    list_filter = ["status", "model"]
    ordering = ["-created_at"]
    actions = [cancel_runs]
    fields = (
        "id",
        "conversation",
        "status",
        "model",
        "trigger_message",
        "iterations",
        "attempt",
        "error",
        "usage",
        "created_at",
        "started_at",
        "finished_at",
        "cancel_requested_at",
        "lease_expires_at",
    )
    readonly_fields = fields

    def get_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        if can_read_transcripts(request):
            return self.fields
        # The error's message may quote the provider's answer: its code is metadata.
        return [("error_code" if name == "error" else name) for name in self.fields]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return self.get_fields(request, obj)

    @admin.display(description="conversation")
    def conversation_link(self, obj: Run) -> str:
        return conversation_link(obj.conversation_id)

    @admin.display(description="tokens")
    def total_tokens(self, obj: Run) -> int | None:
        value = (obj.usage or {}).get("total_tokens")
        return value if isinstance(value, int) else None

    @admin.display(description="error")
    def error_code(self, obj: Run) -> str:
        return str((obj.error or {}).get("code", "")) if obj.error else ""


@admin.register(AuditEvent)
class AuditEventAdmin(ReadOnlyAdmin):
    """Read-only for everyone, superusers included: an audit trail nobody can edit."""

    list_display = ["at", "actor_username", "action", "conversation_id", "owner_id", "reason"]
    list_filter = ["action", ("at", admin.DateFieldListFilter)]
    search_fields = ["actor_username", "=conversation_id", "=owner_id"]
    fields = ("at", "actor", "actor_username", "action", "conversation_id", "owner_id", "reason")
    readonly_fields = fields

    def search_results(
        self, request: HttpRequest, queryset: QuerySet[AuditEvent], search_term: str
    ) -> tuple[QuerySet[AuditEvent], bool]:
        term = search_term.strip()
        key = uuid_or_none(term)
        if key is not None:
            return queryset.filter(conversation_id=key), False
        if term.isdigit():
            return queryset.filter(owner_id=int(term)) | queryset.filter(actor_username=term), False
        return queryset.filter(actor_username=term) if term else queryset, False
