"""Reads for accounts."""

from uuid import UUID

from accounts import sql
from accounts.models import ApiKey, User
from accounts.services import KEY_PREFIX, api_key_hash, api_key_mark_used


def api_key_for_secret(*, secret: str) -> ApiKey | None:
    """The active key with this secret (its owner read along), or None (unknown and
    revoked look the same). Every API request asks: one statement (accounts/sql)."""
    return sql.api_key_by_hash(hashed_secret=api_key_hash(secret=secret))


def api_key_for_authorization(*, header: str) -> ApiKey | None:
    """The active key in `Authorization: Bearer <key>` of an active owner, recording its
    use; None for anything else (other schemes, malformed, unknown or revoked keys)."""
    scheme, _, secret = header.partition(" ")
    secret = secret.strip()
    if scheme.lower() != "bearer" or not secret.startswith(f"{KEY_PREFIX}_") or " " in secret:
        return None
    api_key = api_key_for_secret(secret=secret)
    if api_key is None or not api_key.owner.is_active:
        return None
    api_key_mark_used(api_key=api_key)
    return api_key


def api_key_list(*, owner: User) -> list[ApiKey]:
    """The user's keys, newest first, revoked ones included (they show when and which),
    each with the key that created it."""
    keys = ApiKey.objects.filter(owner=owner).select_related("created_by_key")
    return list(keys.order_by("-created_at"))


def api_key_get(*, owner: User, key_id: object) -> ApiKey:
    """The user's key, or ApiKey.DoesNotExist (also for another user's key or a bad id)."""
    try:
        key = UUID(str(key_id))
    except ValueError:
        raise ApiKey.DoesNotExist from None
    return ApiKey.objects.get(pk=key, owner=owner)
