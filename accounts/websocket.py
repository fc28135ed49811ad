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
from django.http.request import split_domain_port, validate_host
from django.utils.http import is_same_domain

from accounts.selectors import api_key_for_authorization
from config.async_db import db_call

Scope = dict[str, Any]


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", []):
        if key.lower() == name:
            return bytes(value).decode("latin-1")
    return None


def origin_allowed(origin: str | None, scope: Scope) -> bool:
    """The check Django's CSRF protection makes of an Origin header, for a socket: the
    page's own origin (scheme, host and port of this request, the host one of
    ALLOWED_HOSTS) or one of CSRF_TRUSTED_ORIGINS (`https://*.example.com` included)."""
    if not origin or origin == "null":
        return False
    own = _own_origin(scope)
    if own is not None and origin == own:
        return True
    if origin in settings.CSRF_TRUSTED_ORIGINS:
        return True
    parts = urlsplit(origin)
    try:
        netloc = parts.netloc.lower()
    except ValueError:
        return False
    for trusted in settings.CSRF_TRUSTED_ORIGINS:
        allowed = urlsplit(trusted)
        wildcard = "*" in allowed.netloc and allowed.scheme == parts.scheme
        if wildcard and is_same_domain(netloc, allowed.netloc.lstrip("*")):
            return True
    return False


def _own_origin(scope: Scope) -> str | None:
    """`scheme://host[:port]` of the page that may open this socket, from the Host header
    (refused unless it is one of ALLOWED_HOSTS, as Django's request.get_host does)."""
    host = _header(scope, b"host")
    if not host:
        return None
    domain, _port = split_domain_port(host)
    if not domain or not validate_host(domain, settings.ALLOWED_HOSTS):
        return None
    secure = scope.get("scheme") in ("wss", "https")
    proxy_header = getattr(settings, "SECURE_PROXY_SSL_HEADER", None)
    if proxy_header:
        # Behind a proxy that ends TLS, as Django's request.is_secure() trusts it.
        name, value = proxy_header
        wire_name = name.removeprefix("HTTP_").replace("_", "-").lower().encode()
        forwarded = _header(scope, wire_name)
        if forwarded is not None:
            secure = forwarded.split(",")[0].strip() == value
    return f"{'https' if secure else 'http'}://{host}"


@db_call
def _key_auth(header: str) -> dict[str, Any]:
    """The scope entries of a key socket: its user, and the key, so that the socket can
    follow the key's revocation."""
    api_key = api_key_for_authorization(header=header)
    if api_key is None:
        return {"user": AnonymousUser(), "api_key_id": None}
    return {"user": api_key.owner, "api_key_id": api_key.pk}


class WebsocketAuthMiddleware:
    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.session_stack = AuthMiddlewareStack(inner)

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> Any:
        authorization = _header(scope, b"authorization")
        if authorization:
            # A program with a key: no cookie is consulted, so no Origin is needed.
            scope = {**scope, **await _key_auth(authorization), "auth": "api_key"}
            return await self.inner(scope, receive, send)
        origin = _header(scope, b"origin")
        if origin is None:
            # Browsers always send an Origin, so this is a program that sent no key: it is
            # anonymous (the consumer closes with 4401), and its cookies are not consulted.
            return await self.inner(
                {**scope, "user": AnonymousUser(), "auth": "none"}, receive, send
            )
        if not origin_allowed(origin, scope):
            return await WebsocketDenier()(scope, receive, send)
        return await self.session_stack({**scope, "auth": "session"}, receive, send)
