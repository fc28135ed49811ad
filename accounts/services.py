"""Writes for accounts: API key issue, use and revocation."""

import hashlib
import secrets
from datetime import timedelta

from django.db.models import QuerySet
from django.utils import timezone

from accounts.models import ApiKey, User

KEY_PREFIX = "prl"
# Recording every request's use would turn each API read into a write; a minute is
# precise enough to tell a live key from a forgotten one.
LAST_USED_RESOLUTION = timedelta(minutes=1)


def api_key_hash(*, secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def api_key_create(*, owner: User, name: str) -> tuple[ApiKey, str]:
    """Create a key and return it with its full secret, which is never stored."""
    name = name.strip()
    if not name:
        raise ValueError("An API key needs a name.")
    if len(name) > 100:
        raise ValueError("An API key name is at most 100 characters.")
    prefix = secrets.token_hex(4)
    secret = f"{KEY_PREFIX}_{prefix}_{secrets.token_urlsafe(32)}"
    key = ApiKey.objects.create(
        owner=owner, name=name, prefix=prefix, hashed_secret=api_key_hash(secret=secret)
    )
    return key, secret


def api_key_revoke(*, api_key: ApiKey) -> ApiKey:
    if api_key.revoked_at is None:
        api_key.revoked_at = timezone.now()
        api_key.save(update_fields=["revoked_at"])
    return api_key


def api_key_mark_used(*, api_key: ApiKey) -> None:
    now = timezone.now()
    if api_key.last_used_at is None or now - api_key.last_used_at >= LAST_USED_RESOLUTION:
        ApiKey.objects.filter(pk=api_key.pk).update(last_used_at=now)
        api_key.last_used_at = now


def api_keys_revoke(*, queryset: QuerySet[ApiKey]) -> int:
    """Revoke every still-active key of the selection in one UPDATE; returns how many."""
    return queryset.filter(revoked_at__isnull=True).update(revoked_at=timezone.now())
