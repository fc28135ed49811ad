"""A strict Content-Security-Policy for the web UI's pages.

The pages load only their own scripts and styles, so even if sanitising a reply ever
failed, an injected inline script or event handler would still not run.
"""

from collections.abc import Callable
from functools import wraps
from typing import Any

from django.http import HttpRequest
from django.http.response import HttpResponseBase


def policy(host: str) -> str:
    # Websockets are named explicitly: older browsers do not count ws: as 'self'.
    return "; ".join(
        [
            "default-src 'self'",
            "script-src 'self'",
            "style-src 'self'",
            "img-src 'self' data: https:",
            f"connect-src 'self' ws://{host} wss://{host}",
            "object-src 'none'",
            "base-uri 'none'",
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
