"""The transcript page: one branch's path (the active branch's unless `?branch=<id>`
names another), in seq order, a page at a time, each message that has other versions
marked with links to the branches holding them.

Reading it needs `conversations.view_transcript`, and every page shown writes a `viewed`
audit event (actor, conversation, owner, branch, page): moderators can read chats, never
without a trace, and a reviewer can tell which version of a chat was read. The files the
messages carry are listed on the page; opening one is a reading of its own, under the same
permission and audited the same way.
"""

from typing import Any
from uuid import UUID

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.http import FileResponse, Http404, HttpRequest, HttpResponse
from django.template.response import TemplateResponse

from conversations import selectors, services
from conversations.admin.common import actor, can_read_transcripts
from conversations.file_responses import file_response
from conversations.models import AuditEvent, Branch, Conversation, StoredFile

PER_PAGE = 100


def _page_number(request: HttpRequest) -> int:
    raw = request.GET.get("page", "1")
    return int(raw) if raw.isdigit() else 1


def transcript_reason(page: selectors.TranscriptPage) -> str:
    """The audit event's reason: the branch by its whole id, since short ids may collide
    and the trail must say exactly which version of the chat was read."""
    shown = "active" if page.active else "not active"
    return f"transcript page {page.number} of {page.pages}, branch {page.branch.pk} ({shown})"


def transcript_view(
    model_admin: admin.ModelAdmin, request: HttpRequest, object_id: UUID
) -> HttpResponse:
    if not can_read_transcripts(request):
        raise PermissionDenied
    conversation = Conversation.objects.select_related("owner").filter(pk=object_id).first()
    if conversation is None:
        raise Http404("No such conversation.")
    try:
        page = selectors.transcript_page(
            conversation=conversation,
            page=_page_number(request),
            per_page=PER_PAGE,
            # Empty or absent: the active branch. Another conversation's branch, an
            # unknown id or one that is not a UUID is "not found", like the conversation.
            branch_id=request.GET.get("branch") or None,
        )
    except Branch.DoesNotExist:
        raise Http404("No such branch in this conversation.") from None
    services.audit_record(
        actor=actor(request),
        action=AuditEvent.Action.VIEWED,
        conversation=conversation,
        reason=transcript_reason(page),
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


def file_reason(file: StoredFile) -> str:
    """The audit event's reason names the file by id, type and size, not by its name: the
    name is the owner's words, and the trail is open to staff who may not read them."""
    return f"file {file.pk} ({file.content_type}, {file.size} bytes)"


def transcript_file_view(request: HttpRequest, object_id: UUID, file_id: str) -> FileResponse:
    """A file some message of the conversation carries, served as the API serves files."""
    if not can_read_transcripts(request):
        raise PermissionDenied
    conversation = Conversation.objects.filter(pk=object_id).first()
    if conversation is None:
        raise Http404("No such conversation.")
    try:
        file = selectors.conversation_file_get(conversation=conversation, file_id=file_id)
    except StoredFile.DoesNotExist:
        raise Http404("No such file in this conversation.") from None
    # Opened before the trail is written, so a file whose bytes cannot be read leaves none.
    response = file_response(file=file, request=request)
    services.audit_record(
        actor=actor(request),
        action=AuditEvent.Action.VIEWED,
        conversation=conversation,
        reason=file_reason(file),
    )
    return response
