"""Writes for accounts: API key issue, use and revocation; idempotency keys."""

import hashlib
import secrets
from collections.abc import Iterable
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Q, QuerySet
from django.utils import timezone

from accounts.models import ApiKey, IdempotencyRecord, User
from accounts.sockets import user_sockets_recheck
from accounts.text import unstorable_reason

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
    if reason := unstorable_reason(name):
        raise ValueError(f"An API key name {reason}.")
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
    """Revoke every still-active key of the selection in one UPDATE; returns how many.
    Sockets the keys opened close (an UPDATE sends no save signal, so this asks them)."""
    active = queryset.filter(revoked_at__isnull=True)
    owners = set(active.values_list("owner_id", flat=True))
    revoked = active.update(revoked_at=timezone.now())
    for owner_id in owners:
        user_sockets_recheck(user_id=owner_id)
    return revoked


# --- Idempotency-Key -------------------------------------------------------------------

IDEMPOTENCY_KEY_MAX = 255


class IdempotencyInFlight(Exception):
    """The first request with this key has not been answered yet."""


class IdempotencyKeyReused(Exception):
    """The key was used before with a different request."""


def idempotency_begin(*, owner: User, key: str, fingerprint: str) -> IdempotencyRecord:
    """Claim `key` for a request, committed at once so a concurrent repeat sees the claim.

    Returns the record: with `completed_at` set it holds the answer to replay; without it
    the caller now owns the key and must `idempotency_complete` or `idempotency_release` it.
    Raises IdempotencyInFlight or IdempotencyKeyReused.
    """
    if not key or len(key) > IDEMPOTENCY_KEY_MAX or not key.isprintable() or not key.isascii():
        raise ValueError(f"must be 1 to {IDEMPOTENCY_KEY_MAX} printable ASCII characters")
    now = timezone.now()
    expired = now - timedelta(seconds=settings.PARLEY_IDEMPOTENCY_TTL_SECONDS)
    # Expired keys are forgotten here, per user, so no periodic job is needed.
    IdempotencyRecord.objects.filter(owner=owner, created_at__lt=expired).delete()
    for _attempt in range(3):
        try:
            with transaction.atomic():
                return IdempotencyRecord.objects.create(
                    owner=owner, key=key, fingerprint=fingerprint
                )
        except IntegrityError:
            existing = IdempotencyRecord.objects.filter(owner=owner, key=key).first()
        if existing is None:
            continue  # released meanwhile: claim it again
        if existing.fingerprint != fingerprint:
            raise IdempotencyKeyReused
        if existing.completed_at is not None:
            return existing
        stale = now - timedelta(seconds=settings.PARLEY_IDEMPOTENCY_LOCK_SECONDS)
        # A claim this old belongs to a request that died without answering: take it over.
        if existing.created_at < stale and IdempotencyRecord.objects.filter(
            pk=existing.pk, completed_at__isnull=True, created_at=existing.created_at
        ).update(created_at=now):
            existing.created_at = now
            return existing
        raise IdempotencyInFlight
    raise IdempotencyInFlight


def idempotency_complete(*, record: IdempotencyRecord, status_code: int, body: Any) -> None:
    """Store the answer that repeats of this request will get."""
    record.completed_at = timezone.now()
    record.status_code = status_code
    record.body = body
    record.save(update_fields=["completed_at", "status_code", "body"])


def idempotency_release(*, record: IdempotencyRecord) -> None:
    """Forget the claim (the request failed), so the client may retry with the same key."""
    IdempotencyRecord.objects.filter(pk=record.pk, completed_at__isnull=True).delete()


# The status a stored answer keeps once it was forgotten for a deletion.
ANSWER_GONE_STATUS = 410


def idempotency_answers_forget(*, owner_ids: Iterable[int], mentioning: Iterable[str]) -> int:
    """Stored answers that name a deleted object (a conversation's id) may quote its text:
    they lose their body, so nothing of it outlives the deletion, and a repeat is told so
    (the status 410 marks it; the record stays, so the request is still not carried out
    twice)."""
    matches = Q()
    for text in mentioning:
        matches |= Q(body__icontains=text)
    if not matches:
        return 0
    return (
        IdempotencyRecord.objects.filter(owner_id__in=set(owner_ids), completed_at__isnull=False)
        .exclude(status_code=ANSWER_GONE_STATUS)
        .filter(matches)
        .update(status_code=ANSWER_GONE_STATUS, body=None)
    )
