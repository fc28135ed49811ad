from django.contrib import admin
from django.contrib.auth.admin import UserAdmin

from accounts.models import ApiKey, User

admin.site.register(User, UserAdmin)


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):
    list_display = ["name", "prefix", "owner", "created_at", "last_used_at", "revoked_at"]
    list_select_related = ["owner"]
    search_fields = ["name", "prefix", "owner__username"]
    readonly_fields = ["prefix", "hashed_secret", "created_at", "last_used_at"]
    autocomplete_fields = ["owner"]
