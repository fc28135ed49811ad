"""Websocket authentication: a session cookie (browsers) or an API key (programs).

Cross-site websocket hijacking only works with ambient credentials, so a socket that
relies on the session cookie must come from an allowed Origin, while one that presents
an API key in the Authorization header needs no Origin at all. Channels' stock
AllowedHostsOriginValidator refuses a missing Origin outright, which would lock programs
out, hence this small middleware of our own.
"""

from typing import Any
from urllib.parse import urlsplit

from channels.auth import AuthMiddlewareStack
from channels.security.websocket import WebsocketDenier
from django.conf import settings
from django.contrib.auth.models import AnonymousUser
from django.http.request import validate_host

from accounts.selectors import user_for_authorization
from config.async_db import db_call

Scope = dict[str, Any]


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", []):
        if key.lower() == name:
            return bytes(value).decode("latin-1")
    return None


def origin_allowed(origin: str | None) -> bool:
    if not origin:
        return False
    parts = urlsplit(origin)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return False
    if origin in settings.CSRF_TRUSTED_ORIGINS:
        return True
    # urlsplit drops an IPv6 literal's brackets, which ALLOWED_HOSTS spells with them.
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    return validate_host(host, settings.ALLOWED_HOSTS)


@db_call
def _user_for_key(header: str) -> Any:
    return user_for_authorization(header=header) or AnonymousUser()


class WebsocketAuthMiddleware:
    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.session_stack = AuthMiddlewareStack(inner)

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> Any:
        authorization = _header(scope, b"authorization")
        if authorization:
            # A program with a key: no cookie is consulted, so no Origin is needed.
            scope = {**scope, "user": await _user_for_key(authorization), "auth": "api_key"}
            return await self.inner(scope, receive, send)
        origin = _header(scope, b"origin")
        if origin is None:
            # Browsers always send an Origin, so this is a program that sent no key: it is
            # anonymous (the consumer closes with 4401), and its cookies are not consulted.
            return await self.inner(
                {**scope, "user": AnonymousUser(), "auth": "none"}, receive, send
            )
        if not origin_allowed(origin):
            return await WebsocketDenier()(scope, receive, send)
        return await self.session_stack({**scope, "auth": "session"}, receive, send)
