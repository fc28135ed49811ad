"""The transcript page: a conversation's messages in seq order, a page at a time.

Reading it needs `conversations.view_transcript`, and every page shown writes a `viewed`
audit event (actor, conversation, owner, page): moderators can read chats, never without
a trace.
"""

from typing import Any
from uuid import UUID

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.template.response import TemplateResponse

from conversations import selectors, services
from conversations.admin.common import actor, can_read_transcripts
from conversations.models import AuditEvent, Conversation

PER_PAGE = 100


def _page_number(request: HttpRequest) -> int:
    raw = request.GET.get("page", "1")
    return int(raw) if raw.isdigit() else 1


def transcript_view(
    model_admin: admin.ModelAdmin, request: HttpRequest, object_id: UUID
) -> HttpResponse:
    if not can_read_transcripts(request):
        raise PermissionDenied
    conversation = Conversation.objects.select_related("owner").filter(pk=object_id).first()
    if conversation is None:
        raise Http404("No such conversation.")
    page = selectors.transcript_page(
        conversation=conversation, page=_page_number(request), per_page=PER_PAGE
    )
    services.audit_record(
        actor=actor(request),
        action=AuditEvent.Action.VIEWED,
        conversation=conversation,
        reason=f"transcript page {page.number} of {page.pages}",
    )
    context: dict[str, Any] = {
        **model_admin.admin_site.each_context(request),
        "opts": model_admin.opts,
        "title": f"Transcript: {conversation.title or conversation}",
        "conversation": conversation,
        "page": page,
        "previous_page": page.number - 1 if page.number > 1 else None,
        "next_page": page.number + 1 if page.number < page.pages else None,
        "can_view_runs": request.user.has_perm("conversations.view_run"),
    }
    return TemplateResponse(request, "admin/conversations/conversation/transcript.html", context)
