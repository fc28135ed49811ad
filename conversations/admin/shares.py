"""Share links in the admin: the list and detail (ids, audience, times, views, status;
never a token, of which only the hash is kept, and that is never shown, filtered or
ordered by), revoking selected links, and the conversation admin's action that makes a
link for its owner, its URL shown on the answer's page this once. Both writes are
audited.

A link shows the conversation's messages to whoever holds it, so making one needs the
transcript permission besides the permission to add shares.
"""

from datetime import timedelta
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.template.response import TemplateResponse
from django.utils import timezone

from conversations import selectors, services
from conversations.admin.actions import selection_context
from conversations.admin.common import actor, can_read_transcripts, conversation_link
from conversations.admin.read_only import ListActionsAdmin
from conversations.errors import ValidationFailed
from conversations.models import Conversation, Share

# Links one action makes at most: each URL is shown on the page that answers it.
SHARE_LINKS_AT_ONCE = 20
SHARE_PERMISSION = "conversations.add_share"


class ShareStatusFilter(admin.SimpleListFilter):
    title = "status"
    parameter_name = "status"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(status, status.capitalize()) for status in selectors.SHARE_STATUSES]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if self.value() in selectors.SHARE_STATUSES:
            return selectors.shares_in_status(queryset, str(self.value()))
        return queryset


@admin.action(description="Revoke selected share links", permissions=["change"])
def revoke_shares(
    modeladmin: admin.ModelAdmin, request: HttpRequest, queryset: QuerySet[Share]
) -> None:
    count = services.shares_revoke(queryset=queryset, actor=actor(request))
    if count:
        modeladmin.message_user(request, f"Revoked {count} share link(s).", messages.SUCCESS)
    else:
        modeladmin.message_user(request, "The selected links were closed already.", messages.INFO)


@admin.register(Share)
class ShareAdmin(ListActionsAdmin):
    list_display = [
        "short_id",
        "conversation_short_id",
        "audience",
        "created_at",
        "expires_at",
        "revoked_at",
        "view_count",
        "status",
    ]
    list_filter = ["audience", ShareStatusFilter, ("created_at", admin.DateFieldListFilter)]
    search_help_text = "A share's or a conversation's id."
    ordering = ["-created_at"]
    actions = [revoke_shares]
    fields = (
        "id",
        "conversation",
        "created_by",
        "audience",
        "status",
        "created_at",
        "expires_at",
        "revoked_at",
        "message_count",
        "view_count",
    )
    readonly_fields = fields

    @admin.display(description="share", ordering="id")
    def short_id(self, obj: Share) -> str:
        return str(obj.pk)[:8]

    @admin.display(description="conversation")
    def conversation_short_id(self, obj: Share) -> str:
        return conversation_link(obj.conversation_id)

    @admin.display(description="status")
    def status(self, obj: Share) -> str:
        return selectors.share_status(obj)


# --- making a link from the conversation admin ------------------------------------------

EXPIRY_CHOICES = [("1", "in a day"), ("7", "in 7 days"), ("30", "in 30 days"), ("", "never")]


class ShareForm(forms.Form):
    audience = forms.ChoiceField(
        choices=[
            (Share.Audience.SIGNED_IN, "signed-in users holding the link"),
            (Share.Audience.PUBLIC, "anyone holding the link"),
        ],
        initial=Share.Audience.SIGNED_IN,
        widget=forms.RadioSelect,
    )
    expires = forms.ChoiceField(choices=EXPIRY_CHOICES, initial="7", required=False)


class ShareLinkPermission(admin.ModelAdmin):
    """Mixed into the conversation admin: who may make share links there."""

    def has_share_permission(self, request: HttpRequest) -> bool:
        user: Any = request.user
        return can_read_transcripts(request) and bool(user.has_perm(SHARE_PERMISSION))


@admin.action(description="Create share link…", permissions=["share"])
def create_share_link(
    modeladmin: admin.ModelAdmin, request: HttpRequest, queryset: QuerySet[Conversation]
) -> TemplateResponse | None:
    """A link per selected conversation, made for its owner (who sees it among their
    links and may revoke it), each URL shown on the page that answers this once: it is
    never stored, so it is never carried to a later page either."""
    count = queryset.count()
    if count > SHARE_LINKS_AT_ONCE:
        message = f"Select at most {SHARE_LINKS_AT_ONCE} conversations to share at once."
        modeladmin.message_user(request, message, messages.ERROR)
        return None
    form = ShareForm(request.POST if "apply" in request.POST else None)
    context = {
        **selection_context(modeladmin, request, queryset),
        "form": form,
        "title": "Create share links",
    }
    if form.is_valid():
        days = form.cleaned_data["expires"]
        expires_at = timezone.now() + timedelta(days=int(days)) if days else None
        for conversation in queryset.select_related("owner"):
            _share_made(request, conversation, form.cleaned_data["audience"], expires_at)
        context["done"] = True
    return TemplateResponse(request, "admin/conversations/share_create.html", context)


def _share_made(
    request: HttpRequest, conversation: Conversation, audience: str, expires_at: Any
) -> None:
    """One link, its URL (or why there is none) told on this answer's own page: the
    message is rendered there, never stored for a later one."""
    name = f"Conversation {str(conversation.pk)[:8]}"
    try:
        _share, token = services.share_create(
            conversation=conversation,
            user=conversation.owner,
            audience=audience,
            expires_at=expires_at,
            actor=actor(request),
        )
    except ValidationFailed as exc:
        messages.error(request, f"{name}: no link made: {exc}")
        return
    url = request.build_absolute_uri(selectors.share_link_path(token))
    messages.success(request, f"{name} ({audience}): {url}")
