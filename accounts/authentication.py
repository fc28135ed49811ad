"""DRF authentication by `Authorization: Bearer <key>`, and by password where allowed."""

from typing import Any

from django.core.cache import cache
from rest_framework import authentication, exceptions
from rest_framework.request import Request

from accounts.models import ApiKey, User
from accounts.selectors import api_key_for_secret
from accounts.services import KEY_PREFIX, api_key_mark_used


class ApiKeyAuthentication(authentication.BaseAuthentication):
    keyword = "Bearer"

    def authenticate(self, request: Request) -> tuple[User, ApiKey] | None:
        header = authentication.get_authorization_header(request).decode("latin-1")
        if not header:
            return None
        scheme, _, secret = header.partition(" ")
        if scheme.lower() != self.keyword.lower():
            # Some other scheme: leave it to other authenticators.
            return None
        secret = secret.strip()
        if not secret or " " in secret or not secret.startswith(f"{KEY_PREFIX}_"):
            raise exceptions.AuthenticationFailed("Malformed API key.")
        api_key = api_key_for_secret(secret=secret)
        if api_key is None or not api_key.owner.is_active:
            raise exceptions.AuthenticationFailed("Invalid or revoked API key.")
        api_key_mark_used(api_key=api_key)
        return api_key.owner, api_key

    def authenticate_header(self, request: Request) -> str:
        return self.keyword


class PasswordAuthentication(authentication.BasicAuthentication):
    """HTTP Basic with a cap on failed attempts, per username and per client address.

    DRF applies throttles only after authentication succeeds, so without this cap a wrong
    password could be tried without limit. Past the cap, even the right password is
    refused until the window ends: a guesser learns nothing from the answer.
    """

    max_failures = 10
    window_seconds = 15 * 60

    def authenticate_credentials(
        self, userid: str, password: str, request: Request | None = None
    ) -> tuple[Any, None]:
        address = request.META.get("REMOTE_ADDR", "") if request is not None else ""
        keys = [f"parley:pw-fail:user:{userid.lower()}", f"parley:pw-fail:addr:{address}"]
        if any((cache.get(key) or 0) >= self.max_failures for key in keys):
            raise exceptions.Throttled(
                wait=self.window_seconds, detail="Too many failed log-in attempts."
            )
        try:
            return super().authenticate_credentials(userid, password, request)
        except exceptions.AuthenticationFailed:
            for key in keys:
                cache.add(key, 0, self.window_seconds)
                cache.incr(key)
            raise
