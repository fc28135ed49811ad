"""Admin for the accounts app: users, groups and API keys (here, not in accounts/, since
they use the conversations' text guard and deleting a user deletes their conversations;
`accounts` never imports `conversations`).

Deleting a user goes through the fast, audited path (conversations.services.user_delete):
Django's stock confirmation page would list every message of every conversation the
user owns, and its collector would load them all.
"""

from typing import Any

from django.contrib import admin, messages
from django.contrib.auth.admin import GroupAdmin, UserAdmin
from django.contrib.auth.models import Group
from django.db.models import Count, IntegerField, OuterRef, QuerySet, Subquery, Sum
from django.db.models.functions import Coalesce
from django.http import HttpRequest

from accounts.models import ApiKey, User
from accounts.services import api_keys_revoke
from conversations import services
from conversations.admin.common import actor
from conversations.admin.paging import EstimatedCountPaginator
from conversations.admin.text_guard import TextGuardMixin
from conversations.models import Conversation


def _per_owner(aggregate: Any) -> Subquery:
    """A correlated subquery per listed user: the page's 100 users, not the whole table."""
    return Subquery(
        Conversation.objects.filter(owner=OuterRef("pk"))
        .order_by()
        .values("owner")
        .annotate(value=aggregate)
        .values("value"),
        output_field=IntegerField(),
    )


# Django registers groups itself; registered again so the text guard covers every admin.
admin.site.unregister(Group)


@admin.register(Group)
class ParleyGroupAdmin(TextGuardMixin, GroupAdmin):
    pass


@admin.register(User)
class ParleyUserAdmin(TextGuardMixin, UserAdmin):
    list_display = [
        "username",
        "email",
        "is_staff",
        "is_active",
        "conversation_count",
        "message_count",
        "last_login",
    ]
    paginator = EstimatedCountPaginator
    show_full_result_count = False

    def get_queryset(self, request: HttpRequest) -> QuerySet[User]:
        return (
            super()
            .get_queryset(request)
            .annotate(
                conversations_total=Coalesce(_per_owner(Count("pk")), 0),
                messages_total=Coalesce(_per_owner(Sum("message_count")), 0),
            )
        )

    @admin.display(description="conversations", ordering="conversations_total")
    def conversation_count(self, obj: Any) -> int:
        return int(obj.conversations_total)

    @admin.display(description="messages", ordering="messages_total")
    def message_count(self, obj: Any) -> int:
        return int(obj.messages_total)

    def get_deleted_objects(
        self, objs: Any, request: HttpRequest
    ) -> tuple[list[str], dict[str, int], set[str], list[str]]:
        """Counts of what goes with the users, instead of a list of every row."""
        ids = [obj.pk for obj in objs]
        owned = Conversation.objects.filter(owner__in=ids)
        counts = {
            "users": len(ids),
            "conversations": owned.count(),
            "messages": owned.aggregate(n=Sum("message_count"))["n"] or 0,
            "API keys": ApiKey.objects.filter(owner__in=ids).count(),
        }
        perms_needed: set[str] = set()
        if not self.has_delete_permission(request):
            perms_needed.add("user")
        return [str(obj) for obj in objs], counts, perms_needed, []

    def delete_model(self, request: HttpRequest, obj: User) -> None:
        services.user_delete(actor=actor(request), user=obj)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[User]) -> None:
        for user in queryset:
            services.user_delete(actor=actor(request), user=user)


@admin.action(description="Revoke selected API keys", permissions=["change"])
def revoke_keys(
    modeladmin: admin.ModelAdmin, request: HttpRequest, queryset: QuerySet[ApiKey]
) -> None:
    revoked = api_keys_revoke(queryset=queryset)
    modeladmin.message_user(request, f"Revoked {revoked} API key(s).", messages.SUCCESS)


@admin.register(ApiKey)
class ApiKeyAdmin(TextGuardMixin, admin.ModelAdmin):
    """Keys are created by their owners (the secret is shown to them once); staff can
    only see and revoke them."""

    list_display = [
        "name",
        "prefix",
        "owner",
        "scopes_shown",
        "created_at",
        "last_used_at",
        "revoked_at",
    ]
    list_filter = [("revoked_at", admin.EmptyFieldListFilter)]
    list_select_related = ["owner"]
    search_fields = ["name", "=prefix", "owner__username"]
    fields = (
        "name",
        "prefix",
        "owner",
        "scopes_shown",
        "created_by_key",
        "created_at",
        "last_used_at",
        "revoked_at",
    )
    readonly_fields = fields
    actions = [revoke_keys]

    @admin.display(description="scopes")
    def scopes_shown(self, obj: ApiKey) -> str:
        return ", ".join(obj.scopes) or "none"

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False
