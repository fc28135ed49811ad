"""Bulk actions on selected conversations: flag, unflag, export, delete.

Each is a thin adapter: it asks for what it needs (a reason, a confirmation), then calls a
service, which writes the audit trail. Intermediate pages carry the selection as Django's
own confirmation pages do; with "select all" they carry the filter, not a list of ids.
"""

from collections.abc import Callable, Iterator
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.db.models import QuerySet, Sum
from django.http import HttpRequest, HttpResponseBase
from django.template.response import TemplateResponse
from django.utils import timezone

from conversations import services
from conversations.admin.common import actor
from conversations.admin.streaming import download
from conversations.errors import ValidationFailed
from conversations.formats import archives
from conversations.models import Conversation, Run
from conversations.services.governance import FLAG_REASON_MAX


class ReasonForm(forms.Form):
    reason = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 3, "cols": 60}), max_length=FLAG_REASON_MAX
    )


class OptionalReasonForm(ReasonForm):
    reason = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 3, "cols": 60}),
        max_length=FLAG_REASON_MAX,
        required=False,
    )


def selection_context(
    modeladmin: admin.ModelAdmin, request: HttpRequest, queryset: QuerySet[Conversation]
) -> dict[str, Any]:
    select_across = request.POST.get("select_across") == "1"
    return {
        **modeladmin.admin_site.each_context(request),
        "opts": modeladmin.opts,
        "action": request.POST.get("action", ""),
        "select_across": "1" if select_across else "0",
        "selected": request.POST.getlist(helpers.ACTION_CHECKBOX_NAME),
        "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
        "count": queryset.count(),
    }


def _reason_page(
    modeladmin: admin.ModelAdmin,
    request: HttpRequest,
    queryset: QuerySet[Conversation],
    *,
    form_class: type[ReasonForm],
    title: str,
    apply: Callable[[str], int],
    done: str,
) -> TemplateResponse | None:
    form = form_class(request.POST if "apply" in request.POST else None)
    if form.is_valid():
        try:
            count = apply(form.cleaned_data["reason"])
        except ValidationFailed as exc:
            form.add_error("reason", str(exc))
        else:
            modeladmin.message_user(request, done.format(count=count), messages.SUCCESS)
            return None
    context = {**selection_context(modeladmin, request, queryset), "form": form, "title": title}
    return TemplateResponse(request, "admin/conversations/conversation/reason.html", context)


@admin.action(description="Flag selected conversations for review…", permissions=["change"])
def flag(
    modeladmin: admin.ModelAdmin, request: HttpRequest, queryset: QuerySet[Conversation]
) -> TemplateResponse | None:
    def apply(reason: str) -> int:
        return services.conversations_flag(actor=actor(request), queryset=queryset, reason=reason)

    return _reason_page(
        modeladmin,
        request,
        queryset,
        form_class=ReasonForm,
        title="Flag conversations for review",
        apply=apply,
        done="Flagged {count} conversation(s).",
    )


@admin.action(description="Remove the flag from selected conversations…", permissions=["change"])
def unflag(
    modeladmin: admin.ModelAdmin, request: HttpRequest, queryset: QuerySet[Conversation]
) -> TemplateResponse | None:
    def apply(reason: str) -> int:
        return services.conversations_unflag(actor=actor(request), queryset=queryset, reason=reason)

    return _reason_page(
        modeladmin,
        request,
        queryset,
        form_class=OptionalReasonForm,
        title="Remove the review flag",
        apply=apply,
        done="Unflagged {count} conversation(s).",
    )


@admin.action(description="Delete selected conversations…", permissions=["delete"])
def delete_selected(
    modeladmin: admin.ModelAdmin, request: HttpRequest, queryset: QuerySet[Conversation]
) -> TemplateResponse | None:
    """Replaces Django's delete_selected, whose confirmation page lists every related row
    (every message of every conversation). This one shows counts, computed from the
    conversations' message counters, and deletes a page of conversations per statement."""
    form = OptionalReasonForm(request.POST if "apply" in request.POST else None)
    if form.is_valid():
        count = services.conversations_delete(
            actor=actor(request), queryset=queryset, reason=form.cleaned_data["reason"]
        )
        modeladmin.message_user(request, f"Deleted {count} conversation(s).", messages.SUCCESS)
        return None
    ids = queryset.values("pk")
    context = {
        **selection_context(modeladmin, request, queryset),
        "form": form,
        "title": "Delete conversations",
        "messages_count": queryset.aggregate(n=Sum("message_count"))["n"] or 0,
        "runs_count": Run.objects.filter(conversation__in=ids).count(),
        "owners_count": queryset.order_by().values("owner_id").distinct().count(),
    }
    return TemplateResponse(
        request, "admin/conversations/conversation/delete_confirmation_counts.html", context
    )


def _export(
    request: HttpRequest,
    queryset: QuerySet[Conversation],
    *,
    export_format: str,
    chunks: Callable[[QuerySet[Conversation]], Iterator[bytes]],
    extension: str,
    content_type: str,
) -> HttpResponseBase:
    services.conversations_export_record(
        actor=actor(request), queryset=queryset, export_format=export_format
    )
    stamp = timezone.now().strftime("%Y%m%d-%H%M%S")
    return download(
        request,
        chunks(queryset),
        filename=f"conversations-{stamp}.{extension}",
        content_type=content_type,
    )


@admin.action(description="Export selected as a ZIP of JSON files", permissions=["transcript"])
def export_json_zip(
    modeladmin: admin.ModelAdmin, request: HttpRequest, queryset: QuerySet[Conversation]
) -> HttpResponseBase:
    return _export(
        request,
        queryset,
        export_format="json",
        chunks=archives.json_zip_stream,
        extension="json.zip",
        content_type="application/zip",
    )


@admin.action(
    description="Export selected as JSONL (fine-tuning format)", permissions=["transcript"]
)
def export_jsonl(
    modeladmin: admin.ModelAdmin, request: HttpRequest, queryset: QuerySet[Conversation]
) -> HttpResponseBase:
    return _export(
        request,
        queryset,
        export_format="jsonl",
        chunks=archives.jsonl_stream,
        extension="jsonl",
        content_type="application/jsonl; charset=utf-8",
    )


@admin.action(description="Export selected as a ZIP of Markdown files", permissions=["transcript"])
def export_markdown_zip(
    modeladmin: admin.ModelAdmin, request: HttpRequest, queryset: QuerySet[Conversation]
) -> HttpResponseBase:
    return _export(
        request,
        queryset,
        export_format="markdown",
        chunks=archives.markdown_zip_stream,
        extension="md.zip",
        content_type="application/zip",
    )


@admin.action(description="Export messages of selected as CSV", permissions=["transcript"])
def export_csv(
    modeladmin: admin.ModelAdmin, request: HttpRequest, queryset: QuerySet[Conversation]
) -> HttpResponseBase:
    return _export(
        request,
        queryset,
        export_format="csv",
        chunks=archives.csv_stream,
        extension="csv",
        content_type="text/csv; charset=utf-8",
    )
