"""Content-Security-Policy for every page Parley serves, set in one place (the middleware
below), so no page is missed: error pages, log-in, the admin and the API docs included.

The web UI's pages load only their own scripts and styles, so even if sanitising a reply
ever failed, an injected inline script or event handler would still not run; images and
media come only from Parley itself (and, for images, from blob: URLs the page makes of a
file the user is about to attach), so a reply cannot make the browser fetch a URL that
carries conversation text away. The admin and the API docs get a policy as strict as
those pages allow: their own scripts only, inline styles (the admin's widgets and the
docs set style attributes), data: images (the docs' icons) and blob: workers (Redoc).
"""

from collections.abc import Callable
from functools import wraps
from typing import Any, TypeVar, cast

from django.conf import settings
from django.core.exceptions import DisallowedHost
from django.http import HttpRequest, HttpResponse
from django.http.response import HttpResponseBase


def _websockets(host: str) -> str:
    # Named explicitly: older browsers do not count ws: as 'self'. Production lists wss only.
    return " ".join(f"{scheme}://{host}" for scheme in settings.PARLEY_CSP_WEBSOCKET_SCHEMES)


def policy(host: str) -> str:
    """The web UI's policy."""
    return "; ".join(
        [
            "default-src 'self'",
            "script-src 'self'",
            "style-src 'self'",
            # Replies' remote images are never loaded (the page shows a link instead). blob:
            # is the preview of a file being attached, read locally, never fetched.
            "img-src 'self' blob:",
            "media-src 'self'",
            f"connect-src 'self' {_websockets(host)}",
            "object-src 'none'",
            "base-uri 'none'",
            "form-action 'self'",
            "frame-ancestors 'none'",
        ]
    )


def site_policy() -> str:
    """The policy of the admin and the API docs."""
    return "; ".join(
        [
            "default-src 'self'",
            "script-src 'self'",
            "style-src 'self' 'unsafe-inline'",
            "img-src 'self' data:",
            "media-src 'self'",
            "font-src 'self' data:",
            "worker-src 'self' blob:",
            "connect-src 'self'",
            "object-src 'none'",
            "base-uri 'self'",
            "form-action 'self'",
            "frame-ancestors 'none'",
        ]
    )


View = TypeVar("View", bound=Callable[..., HttpResponseBase])


def strict_csp(view: View) -> View:
    """The web UI's policy on one view's responses (the middleware sets it anyway)."""

    @wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        response = view(request, *args, **kwargs)
        response.setdefault("Content-Security-Policy", policy(request.get_host()))
        return response

    return cast(View, wrapper)


# Pages that are not the web UI's: Django's admin and the API's documentation.
SITE_POLICY_PREFIXES = ("/admin/", "/api/")


def policy_for(request: HttpRequest, response: HttpResponseBase) -> str:
    if request.path.startswith(SITE_POLICY_PREFIXES):
        return site_policy()
    if settings.DEBUG and response.status_code >= 400:
        # Django's technical error pages (development only) style themselves inline.
        return site_policy()
    try:
        return policy(request.get_host())
    except DisallowedHost:
        # The answer to a request for a host this site is not: it names no socket.
        return site_policy()


class ContentSecurityPolicyMiddleware:
    """Every response gets its page's policy unless a view set one of its own."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        response.setdefault("Content-Security-Policy", policy_for(request, response))
        # Host names of links in replies are not looked up before a click either: a name
        # can carry text too, and the lookup reaches that name's server.
        response.setdefault("X-DNS-Prefetch-Control", "off")
        return response
