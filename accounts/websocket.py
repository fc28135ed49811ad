"""Websocket authentication: a session cookie (browsers) or an API key (programs).

Cross-site websocket hijacking only works with ambient credentials, so a socket that
relies on the session cookie must come from an allowed Origin, while one that presents
an API key in the Authorization header needs no Origin at all. Channels' stock
AllowedHostsOriginValidator refuses a missing Origin outright, which would lock programs
out, hence this small middleware of our own.
"""

import io
from typing import Any

from channels.auth import AuthMiddlewareStack
from channels.security.websocket import WebsocketDenier
from django.contrib.auth.models import AnonymousUser
from django.core.handlers.asgi import ASGIRequest
from django.http import HttpRequest, HttpResponse
from django.middleware.csrf import CsrfViewMiddleware

from accounts.models import ALL_SCOPES
from accounts.scopes import scopes_held
from accounts.selectors import api_key_for_authorization
from accounts.sockets import SocketCredential
from config.async_db import db_call

Scope = dict[str, Any]


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", []):
        if key.lower() == name:
            return bytes(value).decode("latin-1")
    return None


def origin_allowed(origin: str | None, scope: Scope) -> bool:
    """Django's own CSRF check of an Origin header, made of the socket's handshake: the
    page's own origin (scheme, host and port, the host one of ALLOWED_HOSTS, a TLS proxy
    as SECURE_PROXY_SSL_HEADER says) or one of CSRF_TRUSTED_ORIGINS, wildcards included."""
    if not origin:
        return False
    request = _handshake_request(scope)
    request.META["HTTP_ORIGIN"] = origin
    # The very check CSRF makes of an HTTP request; a fresh middleware reads the settings
    # as they are now.
    csrf = CsrfViewMiddleware(_no_response)
    return bool(csrf._origin_verified(request))  # type: ignore[attr-defined]


def _handshake_request(scope: Scope) -> HttpRequest:
    """The handshake as the HTTP GET it is, for Django's request helpers (get_host,
    is_secure): ws and wss are http and https there."""
    scheme = "https" if scope.get("scheme") in ("wss", "https") else "http"
    http_scope = {**scope, "type": "http", "method": "GET", "scheme": scheme}
    http_scope.setdefault("path", "/")
    return ASGIRequest(http_scope, io.BytesIO())


def _no_response(request: HttpRequest) -> HttpResponse:
    raise AssertionError("the socket's Origin check never calls a view")


def scope_credential(scope: Scope) -> SocketCredential:
    """The credential the middleware below authenticated a socket with."""
    session = scope.get("session") if scope.get("auth") == "session" else None
    by_key = scope.get("auth") == "api_key"
    return SocketCredential(
        user_id=scope["user"].pk,
        api_key_id=scope.get("api_key_id") if by_key else None,
        session_key=getattr(session, "session_key", None),
        scopes=scope.get("api_key_scopes", frozenset()) if by_key else ALL_SCOPES,
    )


@db_call
def _key_auth(header: str) -> dict[str, Any]:
    """The scope entries of a key socket: its user, and the key, so that the socket can
    follow the key's revocation and knows what the key may do."""
    api_key = api_key_for_authorization(header=header)
    if api_key is None:
        return {"user": AnonymousUser(), "api_key_id": None, "api_key_scopes": frozenset()}
    return {
        "user": api_key.owner,
        "api_key_id": api_key.pk,
        "api_key_scopes": scopes_held(api_key=api_key),
    }


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
