"""Tool servers in the admin: registered, changed and removed through the same services as
the API (checked the same way, audited), with a write-only secret field: the form
never renders the stored secret, a blank one keeps it, "clear the secret" removes it.

Users' tokens are not in the admin at all; a server's page shows how many it has.
"""

from typing import Any

from django import forms
from django.contrib import admin
from django.contrib.auth.models import Group
from django.db.models import Count, QuerySet
from django.http import HttpRequest

from conversations import services
from conversations.admin.common import actor
from conversations.admin.text_guard import TextGuardMixin
from conversations.models import ToolServer
from conversations.services.tool_server_checks import URL_MAX


class ToolServerForm(forms.ModelForm):
    # A plain text field: the services check the URL (internal single-label hosts too).
    url = forms.CharField(
        max_length=URL_MAX, help_text="The server's MCP streamable HTTP endpoint (http or https)."
    )
    secret = forms.CharField(
        required=False,
        strip=False,
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "new-password"}),
        help_text="For a 'shared' server: sent as a bearer token on every user's calls. "
        "Write-only: leave blank to keep the current one.",
    )
    clear_secret = forms.BooleanField(required=False, label="Clear the secret")
    allowed_tools = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 4}),
        help_text="One tool name per line; empty offers all of the server's tools.",
    )

    class Meta:
        model = ToolServer
        fields = ["name", "url", "auth", "groups", "timeout_seconds", "enabled"]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk is not None:
            self.initial["allowed_tools"] = "\n".join(self.instance.allowed_tools)

    def clean_allowed_tools(self) -> list[str]:
        text: str = self.cleaned_data.get("allowed_tools") or ""
        return [line.strip() for line in text.splitlines() if line.strip()]

    def changes(self) -> dict[str, Any]:
        """The cleaned fields as the services take them."""
        data = self.cleaned_data
        changes = {
            name: data[name]
            for name in ("name", "url", "auth", "allowed_tools", "timeout_seconds", "enabled")
            if name in data
        }
        if "groups" in data:
            changes["groups"] = sorted(group.name for group in data["groups"] or [])
        if data.get("secret"):
            changes["secret"] = data["secret"]
        elif data.get("clear_secret"):
            changes["secret"] = None
        return changes

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if data.get("secret") and data.get("clear_secret"):
            self.add_error("clear_secret", "Enter a new secret or clear it, not both.")
        if self.errors:
            return data
        server = self.instance if self.instance.pk is not None else None
        for problem in services.tool_server_problems(server=server, changes=self.changes()):
            name = problem.path.removeprefix("$.").split("[")[0]
            self.add_error(name if name in self.fields else None, problem.message)
        return data

    def _post_clean(self) -> None:
        # The services check and store everything (see clean()); the model's own URL
        # validator would refuse a single-label host such as an internal service.
        pass


@admin.register(ToolServer)
class ToolServerAdmin(TextGuardMixin, admin.ModelAdmin):
    form = ToolServerForm
    list_display = ["name", "url", "auth", "enabled", "secret_shown", "token_count"]
    list_filter = ["auth", "enabled"]
    search_fields = ["name", "url"]
    fieldsets = [
        (
            None,
            {
                "fields": [
                    "name",
                    "url",
                    "auth",
                    "secret",
                    "clear_secret",
                    "groups",
                    "allowed_tools",
                    "timeout_seconds",
                    "enabled",
                ]
            },
        ),
        ("Record", {"fields": ["secret_shown", "token_count", "created_at", "updated_at"]}),
    ]
    readonly_fields = ["secret_shown", "token_count", "created_at", "updated_at"]

    def get_queryset(self, request: HttpRequest) -> QuerySet[ToolServer]:
        return super().get_queryset(request).annotate(tokens=Count("credentials"))

    def formfield_for_manytomany(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        if db_field.name == "groups":
            kwargs["queryset"] = Group.objects.order_by("name")
            kwargs["help_text"] = "Who may use it; none means every user."
        return super().formfield_for_manytomany(db_field, request, **kwargs)

    @admin.display(description="secret set", boolean=True)
    def secret_shown(self, obj: ToolServer) -> bool:
        return obj.secret_set

    @admin.display(description="user tokens", ordering="tokens")
    def token_count(self, obj: ToolServer) -> int:
        tokens = getattr(obj, "tokens", None)
        return obj.credentials.count() if tokens is None else int(tokens)

    def save_model(
        self, request: HttpRequest, obj: ToolServer, form: ToolServerForm, change: bool
    ) -> None:
        changes = form.changes()
        if change:
            current = ToolServer.objects.get(pk=obj.pk)
            saved = services.tool_server_update(actor=actor(request), server=current, **changes)
        else:
            saved = services.tool_server_create(actor=actor(request), **changes)
        # The admin goes on with `obj` (its log entry, the redirect): make it the saved row.
        for model_field in ToolServer._meta.concrete_fields:
            setattr(obj, model_field.attname, getattr(saved, model_field.attname))
        obj._state.adding = False

    def save_related(
        self, request: HttpRequest, form: ToolServerForm, formsets: Any, change: bool
    ) -> None:
        """The services set the groups."""

    def delete_model(self, request: HttpRequest, obj: ToolServer) -> None:
        services.tool_server_delete(actor=actor(request), server=obj)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[ToolServer]) -> None:
        for server in queryset:
            services.tool_server_delete(actor=actor(request), server=server)
