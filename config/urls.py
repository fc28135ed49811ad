from django.contrib import admin
from django.urls import include, path, re_path
from drf_spectacular.views import (
    SpectacularAPIView,
    SpectacularRedocView,
    SpectacularSwaggerSplitView,
)

from conversations.api.errors import api_not_found
from web.forms import AdminLoginForm
from web.urls import auth_urlpatterns

# The admin's log-in says when an account or address is locked, as the web log-in does.
admin.site.login_form = AdminLoginForm

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/v1/", include("conversations.api.urls")),
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    # The split view serves Swagger UI's start-up script as a file: no inline script, so
    # the page works under the site's Content-Security-Policy.
    path("api/docs/", SpectacularSwaggerSplitView.as_view(url_name="api-schema"), name="api-docs"),
    path("api/redoc/", SpectacularRedocView.as_view(url_name="api-schema"), name="api-redoc"),
    re_path(r"^api/", api_not_found),
    *auth_urlpatterns,
    path("", include("web.urls")),
]

# JSON for /api/ paths, Django's pages elsewhere (used when DEBUG is off).
handler400 = "conversations.api.errors.bad_request"
handler404 = "conversations.api.errors.not_found"
handler500 = "conversations.api.errors.server_error"
