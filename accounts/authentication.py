"""DRF authentication by `Authorization: Bearer <key>`, and by password where allowed."""

from typing import Any

from rest_framework import authentication, exceptions
from rest_framework.request import Request

from accounts.login_guard import (
    client_address,
    lock_message,
    login_attempt_succeeded,
    login_lock_remaining,
)
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


class LoginLocked(exceptions.Throttled):
    """429 `login_locked`: too many wrong passwords for this account or address."""

    default_code = "login_locked"


class PasswordAuthentication(authentication.BasicAuthentication):
    """HTTP Basic under the same cap on wrong passwords as the log-in pages
    (accounts.login_guard). DRF applies throttles only after authentication succeeds, so
    without the cap a wrong password could be tried without limit."""

    def authenticate_credentials(
        self, userid: str, password: str, request: Request | None = None
    ) -> tuple[Any, None]:
        address = client_address(request)
        remaining = login_lock_remaining(username=userid, address=address)
        if remaining:
            raise LoginLocked(wait=remaining, detail=lock_message(remaining))
        try:
            # authenticate() counts the attempt (accounts.login_guard.LoginLockBackend).
            result = super().authenticate_credentials(userid, password, request)
        except exceptions.AuthenticationFailed:
            # This very attempt may have started the lock: say so, as the log-in page does.
            remaining = login_lock_remaining(username=userid, address=address)
            if remaining:
                raise LoginLocked(wait=remaining, detail=lock_message(remaining)) from None
            raise
        login_attempt_succeeded(request=request)
        return result
