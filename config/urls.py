from django.contrib import admin
from django.urls import include, path, re_path
from drf_spectacular.views import (
    SpectacularAPIView,
    SpectacularRedocView,
    SpectacularSwaggerSplitView,
)

from config import ops
from conversations.api.errors import api_not_found, read_only
from web.forms import AdminLoginForm
from web.urls import auth_urlpatterns
from web.views.accounts import admin_password_change, login_lock_status

# The admin's log-in says when an account or address is locked, as the web log-in does.
admin.site.login_form = AdminLoginForm

urlpatterns = [
    # For probes and scrapers (config/ops.py): no log-in; /metrics has its own access rule.
    path("healthz", ops.healthz, name="healthz"),
    path("readyz", ops.readyz, name="readyz"),
    path("metrics", ops.metrics, name="metrics"),
    # Before the admin's own: a locked log-in answers 429, as the web log-in does.
    path("admin/login/", login_lock_status(admin.site.login)),
    path(
        "admin/password_change/",
        login_lock_status(admin.site.admin_view(admin_password_change)),
    ),
    path("admin/", admin.site.urls),
    path("api/v1/", include("conversations.api.urls")),
    path("openai/v1/", include("conversations.openai_api.urls")),
    # Read-only pages: other methods get the API's JSON 405, not their renderer's answer.
    path("api/schema/", read_only(SpectacularAPIView.as_view()), name="api-schema"),
    # The split view serves Swagger UI's start-up script as a file: no inline script, so
    # the page works under the site's Content-Security-Policy.
    path(
        "api/docs/",
        read_only(SpectacularSwaggerSplitView.as_view(url_name="api-schema")),
        name="api-docs",
    ),
    path(
        "api/redoc/",
        read_only(
            SpectacularRedocView.as_view(url_name="api-schema", template_name="web/redoc.html")
        ),
        name="api-redoc",
    ),
    re_path(r"^api/", api_not_found),
    *auth_urlpatterns,
    path("", include("web.urls")),
]

# JSON for /api/ paths, Django's pages elsewhere (used when DEBUG is off).
handler400 = "conversations.api.errors.bad_request"
handler404 = "conversations.api.errors.not_found"
handler500 = "conversations.api.errors.server_error"
