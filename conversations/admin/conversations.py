"""The conversation admin: metadata list and detail, the audited transcript, bulk actions
and the usage dashboard. Message text appears only on the transcript page."""

import uuid
from typing import Any

from django.conf import settings
from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.db.models import OuterRef, Q, QuerySet, Subquery
from django.http import HttpRequest, HttpResponse
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html

from accounts.models import User
from conversations import selectors, services
from conversations.admin import actions, shares, usage
from conversations.admin.common import actor, can_read_transcripts
from conversations.admin.owner_form import OwnerForm
from conversations.admin.paging import EstimatedCountPaginator
from conversations.admin.text_guard import TextGuardMixin
from conversations.admin.transcript import transcript_file_view, transcript_view
from conversations.models import Conversation, Run

# Distinct models offered by the filter come from this many recently active conversations:
# a DISTINCT over millions of rows would cost more than the rest of the page.
MODEL_FILTER_SAMPLE = 1000
# Users one search term may name (a username is unique; emails need not be).
OWNER_MATCHES = 100
# Branches listed on a conversation's detail page; the rest are counted, not listed.
BRANCHES_SHOWN = 200


class ArchivedFilter(admin.SimpleListFilter):
    title = "archived"
    parameter_name = "archived"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("yes", "Archived"), ("no", "Not archived")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if self.value() == "yes":
            return queryset.filter(archived_at__isnull=False)
        if self.value() == "no":
            return queryset.filter(archived_at__isnull=True)
        return queryset


class ModelFilter(admin.SimpleListFilter):
    title = "model"
    parameter_name = "model"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        recent = Conversation.objects.order_by("-last_activity_at").values_list("model", flat=True)[
            :MODEL_FILTER_SAMPLE
        ]
        names = {name for name in recent if name} | {settings.PARLEY_MODEL}
        if self.value():
            names.add(str(self.value()))
        return [(name, name) for name in sorted(names)]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if not self.value():
            return queryset
        # A conversation without its own model uses the server default.
        match = Q(model=self.value())
        if self.value() == settings.PARLEY_MODEL:
            match |= Q(model="")
        return queryset.filter(match)


class OwnerFilter(admin.SimpleListFilter):
    """Set by the owner autocomplete above the list or by clicking an owner: lists only
    the chosen owner, never every user."""

    title = "owner"
    parameter_name = "owner"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        value = self.value()
        if not value or not str(value).isdigit():
            return []
        owner = User.objects.filter(pk=int(value)).first()
        return [(str(value), owner.get_username() if owner else f"user {value}")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        if value and str(value).isdigit():
            return queryset.filter(owner_id=int(value))
        return queryset


def _owners_matching(request: HttpRequest, term: str) -> list[int]:
    """Users whose username holds `term` (in any case) or whose email is `term`: at most
    OWNER_MATCHES, those named exactly first. Both lookups are served by the trigram
    indexes of migration 0014 on PostgreSQL."""
    exact = User.objects.filter(Q(username=term) | Q(email__iexact=term))
    partial = User.objects.filter(username__icontains=term)
    found = dict.fromkeys(
        [
            *exact.values_list("pk", flat=True)[:OWNER_MATCHES],
            *partial.values_list("pk", flat=True)[: OWNER_MATCHES + 1],
        ]
    )
    if len(found) > OWNER_MATCHES:
        # Which ones is arbitrary: say so rather than list some owners silently.
        messages.warning(
            request,
            f"More than {OWNER_MATCHES} usernames contain this; only the conversations of "
            f"{OWNER_MATCHES} of those users are listed. Type more of the name.",
        )
    return list(found)[:OWNER_MATCHES]


@admin.register(Conversation)
class ConversationAdmin(shares.ShareLinkPermission, TextGuardMixin, admin.ModelAdmin):
    list_display = [
        "title_or_id",
        "owner_link",
        "message_count",
        # A column of the row itself: no query per conversation listed.
        "branch_count",
        "last_activity_at",
        "flagged",
        "active_run",
        "transcript_link",
    ]
    list_select_related = ["owner"]
    list_filter = [
        "flagged",
        ArchivedFilter,
        ("last_activity_at", admin.DateFieldListFilter),
        ("created_at", admin.DateFieldListFilter),
        ModelFilter,
        OwnerFilter,
    ]
    # Only for Django's search box; search_results decides what a term matches.
    search_fields = ["title"]
    search_reads_text = True
    search_help_text = (
        "Part of the title or of an owner's username, an owner's email, or a conversation id."
    )
    ordering = ["-last_activity_at"]
    paginator = EstimatedCountPaginator
    show_full_result_count = False
    list_per_page = 100
    autocomplete_fields = ["owner"]
    actions = [
        actions.flag,
        actions.unflag,
        actions.export_json_zip,
        actions.export_jsonl,
        actions.export_markdown_zip,
        actions.export_csv,
        shares.create_share_link,
        actions.delete_selected,
    ]
    # Metadata only: message text, the system prompt and the draft are on the transcript page.
    fields = (
        "owner",
        "title",
        "model",
        "tools",
        "metadata",
        "message_count",
        "branch_count",
        "created_at",
        "updated_at",
        "last_activity_at",
        "archived_at",
        "flagged",
        "flag_reason",
        "forked_from",
        "forked_at_seq",
        "pinned",
        "folder_name",
        "tag_count",
    )
    readonly_fields = fields
    # Shown only to those who may read transcripts: the title is the first message's start,
    # a folder's name is the user's words.
    TEXT_DETAIL_FIELDS = ("title", "metadata", "folder_name")
    change_list_template = "admin/conversations/conversation/change_list.html"
    change_form_template = "admin/conversations/conversation/change_form.html"

    # --- permissions: conversations are created by their owners; changes go through the
    # audited actions, so the detail page is read-only. ---------------------------------

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # The list's actions need "change"; the detail page never edits.
        return obj is None and super().has_change_permission(request)

    def has_transcript_permission(self, request: HttpRequest) -> bool:
        return can_read_transcripts(request)

    def get_actions(self, request: HttpRequest) -> dict[str, Any]:
        found = super().get_actions(request)
        stock = found.get("delete_selected")
        if stock is not None and stock[0] is not actions.delete_selected:
            del found["delete_selected"]
        return found

    # Single deletes from the detail page: counts instead of Django's list of every
    # related row, and the same fast, audited delete as the bulk action.
    def get_deleted_objects(
        self, objs: Any, request: HttpRequest
    ) -> tuple[list[str], dict[str, int], set[str], list[str]]:
        ids = [obj.pk for obj in objs]
        counts = {
            "conversations": len(ids),
            "messages": sum(obj.message_count for obj in objs),
            "runs": Run.objects.filter(conversation__in=ids).count(),
        }
        return [str(obj) for obj in objs], counts, set(), []

    def delete_model(self, request: HttpRequest, obj: Conversation) -> None:
        services.conversations_delete(
            actor=actor(request), queryset=Conversation.objects.filter(pk=obj.pk)
        )

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Conversation]) -> None:
        services.conversations_delete(actor=actor(request), queryset=queryset)

    # --- the list ----------------------------------------------------------------------

    def get_queryset(self, request: HttpRequest) -> QuerySet[Conversation]:
        active = Run.objects.filter(
            conversation=OuterRef("pk"), status__in=Run.ACTIVE_STATUSES
        ).values("pk")[:1]
        return super().get_queryset(request).annotate(active_run_id=Subquery(active))

    def search_results(
        self, request: HttpRequest, queryset: QuerySet[Conversation], search_term: str
    ) -> tuple[QuerySet[Conversation], bool]:
        term = search_term.strip()
        if not term:
            return queryset, False
        try:
            exact = uuid.UUID(term)
        except ValueError:
            pass
        else:
            # An id is looked up exactly (the primary key index), never as a substring.
            return queryset.filter(pk=exact), False
        # Owners are found first, so the list is filtered by owner id instead of joining
        # every conversation to its owner; on PostgreSQL every part is an index read.
        match = Q(owner_id__in=_owners_matching(request, term))
        if can_read_transcripts(request):
            # Matching titles would reveal them one query at a time to everyone else.
            # `icontains` is what the title's trigram index (migration 0014) answers.
            match |= Q(title__icontains=term)
        return queryset.filter(match), False

    @admin.display(description="conversation", ordering="title")
    def title_or_id(self, obj: Conversation) -> str:
        return obj.label(with_title=True)

    @admin.display(description="conversation")
    def label(self, obj: Conversation) -> str:
        return str(obj)

    @admin.display(description="owner", ordering="owner__username")
    def owner_link(self, obj: Conversation) -> str:
        return format_html('<a href="?owner={}">{}</a>', obj.owner_id, obj.owner.get_username())

    @admin.display(description="active run")
    def active_run(self, obj: Any) -> str:
        if not getattr(obj, "active_run_id", None):
            return "—"
        url = reverse("admin:conversations_run_change", args=[obj.active_run_id])
        return format_html('<a href="{}">running</a>', url)

    def get_list_display(self, request: HttpRequest) -> Any:
        shown = list(super().get_list_display(request))
        if not can_read_transcripts(request):
            shown.remove("transcript_link")
            shown[shown.index("title_or_id")] = "label"
        return shown

    def get_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        if can_read_transcripts(request):
            return self.fields
        return [name for name in self.fields if name not in self.TEXT_DETAIL_FIELDS]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return self.get_fields(request, obj)

    @admin.display(description="folder")
    def folder_name(self, obj: Conversation) -> str:
        return obj.folder.name if obj.folder is not None else "—"

    @admin.display(description="tags")
    def tag_count(self, obj: Conversation) -> int:
        return obj.tags.count()

    @admin.display(description="transcript")
    def transcript_link(self, obj: Conversation) -> str:
        url = reverse("admin:conversations_conversation_transcript", args=[obj.pk])
        return format_html('<a href="{}">read</a>', url)

    # --- extra pages -------------------------------------------------------------------

    def get_urls(self) -> list[URLPattern]:
        own = [
            path(
                "usage/",
                self.admin_site.admin_view(self.usage_view),
                name="conversations_conversation_usage",
            ),
            path(
                "<uuid:object_id>/transcript/",
                self.admin_site.admin_view(self.transcript_view),
                name="conversations_conversation_transcript",
            ),
            path(
                "<uuid:object_id>/files/<str:file_id>/",
                self.admin_site.admin_view(transcript_file_view),
                name="conversations_conversation_file",
            ),
        ]
        return own + super().get_urls()

    def transcript_view(self, request: HttpRequest, object_id: uuid.UUID) -> HttpResponse:
        return transcript_view(self, request, object_id)

    def usage_view(self, request: HttpRequest) -> HttpResponse:
        return usage.usage_view(self, request)

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        context = {**(extra_context or {}), "owner_form": OwnerForm(self.admin_site, request)}
        return super().changelist_view(request, extra_context=context)

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        # Looked up once for the title and the branches; Django's own view still decides
        # who may see the page (and answers a missing conversation).
        conversation = (
            self.get_object(request, unquote(object_id))
            if self.has_view_or_change_permission(request)
            else None
        )
        context = {
            **(extra_context or {}),
            **self._label_context(request, conversation),
            **self._branches_context(conversation),
            "can_read_transcripts": can_read_transcripts(request),
        }
        return super().change_view(request, object_id, form_url, extra_context=context)

    def history_view(
        self, request: HttpRequest, object_id: str, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        conversation = (
            self.get_object(request, unquote(object_id)) if can_read_transcripts(request) else None
        )
        context = {**(extra_context or {}), **self._label_context(request, conversation)}
        if "conversation_label" in context:
            context["title"] = f"Change history: {context['conversation_label']}"
        return super().history_view(request, object_id, extra_context=context)

    def _label_context(
        self, request: HttpRequest, conversation: Conversation | None
    ) -> dict[str, str]:
        """Page titles and breadcrumbs name the conversation by its title only for those
        who may read message text (the models' own label never carries it)."""
        if conversation is None or not can_read_transcripts(request):
            return {}
        label = conversation.label(with_title=True)
        return {"conversation_label": label, "subtitle": label}

    def _branches_context(self, conversation: Conversation | None) -> dict[str, Any]:
        """The branches table of the detail page: ids, fork points and lengths only, so
        every moderator may see it; the template links each to the transcript only for
        those who may read it."""
        if conversation is None:
            return {}
        rows = selectors.branches_table(conversation=conversation, limit=BRANCHES_SHOWN)
        return {"branches": rows, "branches_more": max(0, conversation.branch_count - len(rows))}
