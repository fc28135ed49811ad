"""Content-Security-Policy for every page Parley serves.

The web UI's pages load only their own scripts and styles, so even if sanitising a reply
ever failed, an injected inline script or event handler would still not run; images and
media come only from Parley itself, so a reply cannot make the browser fetch a URL that
carries conversation text away. Every other page (the admin, the API docs, error pages)
gets a policy as strict as those pages allow: their own scripts only, styles inline
allowed (the admin and the docs use style attributes).

The middleware sets the site policy on any response without one, so no page is missed.
"""

from collections.abc import Callable
from functools import wraps
from typing import Any

from django.conf import settings
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
            # data: only for the page's empty favicon; replies' remote images are never
            # loaded (the page shows a link instead).
            "img-src 'self' data:",
            "media-src 'self'",
            f"connect-src 'self' {_websockets(host)}",
            "object-src 'none'",
            "base-uri 'none'",
            "form-action 'self'",
            "frame-ancestors 'none'",
        ]
    )


def site_policy() -> str:
    """Every other page's policy."""
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


View = Callable[..., HttpResponseBase]


def strict_csp(view: View) -> View:
    @wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        response = view(request, *args, **kwargs)
        response.setdefault("Content-Security-Policy", policy(request.get_host()))
        return response

    return wrapper


class ContentSecurityPolicyMiddleware:
    """The site policy on every response that has none of its own."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        response.setdefault("Content-Security-Policy", site_policy())
        return response
