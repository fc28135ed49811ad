"""Reads for accounts."""

from accounts.models import ApiKey
from accounts.services import api_key_hash


def api_key_for_secret(*, secret: str) -> ApiKey | None:
    """The active key with this secret, or None (unknown and revoked look the same)."""
    return (
        ApiKey.objects.select_related("owner")
        .filter(hashed_secret=api_key_hash(secret=secret), revoked_at__isnull=True)
        .first()
    )
