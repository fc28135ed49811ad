"""Writes for accounts: API key issue (with scopes), use and revocation (with the keys
each key created); idempotency keys."""

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
from accounts.scopes import (
    CHAT,
    KEYS,
    READ,
    scope_require,
    scopes_grantable,
    scopes_held,
    scopes_normalize,
)
from accounts.sockets import user_sockets_recheck
from accounts.text import unstorable_reason

KEY_PREFIX = "prl"
# Recording every request's use would turn each API read into a write; a minute is
# precise enough to tell a live key from a forgotten one.
LAST_USED_RESOLUTION = timedelta(minutes=1)
# A new key's scopes when none are named: it works with conversations, and cannot make
# more keys unless asked to.
DEFAULT_SCOPES = frozenset({CHAT, READ})


def api_key_hash(*, secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


class ApiKeyRevoked(Exception):
    """The key a request came with was revoked while the request was being handled."""


class ScopesInvalid(ValueError):
    """The scopes asked for a new key: unknown names, or none."""


def api_key_create(
    *,
    owner: User,
    name: str,
    scopes: Iterable[str] | None = None,
    created_by: ApiKey | None = None,
) -> tuple[ApiKey, str]:
    """Create a key and return it with its full secret, which is never stored.

    `created_by` is the key the request came with (None for a session or a password): it
    needs the `keys` scope, grants only scopes it holds, and revoking it later revokes the
    new key too. Without `scopes` the key gets `chat` and `read`, as far as the creator
    holds them. ValueError for a bad name (ScopesInvalid for bad scopes); ScopeMissing
    for a creator that may not; ApiKeyRevoked for one revoked meanwhile.
    """
    name = name.strip()
    if not name:
        raise ValueError("An API key needs a name.")
    if len(name) > 100:
        raise ValueError("An API key name is at most 100 characters.")
    if reason := unstorable_reason(name):
        raise ValueError(f"An API key name {reason}.")
    held = scopes_held(api_key=created_by)
    scope_require(held=held, required=KEYS)
    if scopes is None:
        scopes = DEFAULT_SCOPES & held
        if not scopes:
            raise ScopesInvalid("Name the new key's scopes: this key holds no default one.")
    try:
        granted = scopes_normalize(scopes=scopes)
    except ValueError as exc:
        raise ScopesInvalid(str(exc)) from None
    scopes_grantable(held=held, wanted=granted)
    prefix = secrets.token_hex(4)
    secret = f"{KEY_PREFIX}_{prefix}_{secrets.token_urlsafe(32)}"
    with transaction.atomic():
        if created_by is not None and not _key_still_active(created_by):
            # Revoked meanwhile: the revocation's cascade could miss a key made now.
            raise ApiKeyRevoked
        key = ApiKey.objects.create(
            owner=owner,
            name=name,
            prefix=prefix,
            hashed_secret=api_key_hash(secret=secret),
            scopes=granted,
            created_by_key=created_by,
        )
    return key, secret


def _key_still_active(api_key: ApiKey) -> bool:
    """Whether the key is unrevoked, its row locked until the transaction ends, so that a
    revocation waits for the key it is making and then revokes that one too."""
    locked = ApiKey.objects.select_for_update().filter(pk=api_key.pk, revoked_at__isnull=True)
    return locked.exists()


def api_key_revoke(*, api_key: ApiKey, revoked_by: ApiKey | None = None) -> ApiKey:
    """Revoke the key and every key it created, theirs too (api_keys_revoke).

    `revoked_by` is the key the request came with (None for a session or a password): it
    needs the `keys` scope and every scope of the key it revokes (ScopeMissing)."""
    if revoked_by is not None:
        held = scopes_held(api_key=revoked_by)
        scope_require(held=held, required=KEYS)
        scopes_grantable(held=held, wanted=api_key.scopes)
    api_keys_revoke(queryset=ApiKey.objects.filter(pk=api_key.pk))
    api_key.refresh_from_db(fields=["revoked_at"])
    return api_key


def api_key_mark_used(*, api_key: ApiKey) -> None:
    now = timezone.now()
    if api_key.last_used_at is None or now - api_key.last_used_at >= LAST_USED_RESOLUTION:
        ApiKey.objects.filter(pk=api_key.pk).update(last_used_at=now)
        api_key.last_used_at = now


def api_keys_revoke(*, queryset: QuerySet[ApiKey]) -> int:
    """Revoke every still-active key of the selection and, level by level, every key they
    created, in one transaction; returns how many were revoked. Sockets and streams the
    keys opened close (an UPDATE sends no save signal, so this asks them)."""
    now = timezone.now()
    revoked = 0
    owners: set[int] = set()
    with transaction.atomic():
        level = set(queryset.values_list("pk", flat=True))
        seen = set(level)
        while level:
            # Updated before their children are read: a key being used to create one holds
            # its row (api_key_create), so its new key is committed and found below.
            active = ApiKey.objects.filter(pk__in=level, revoked_at__isnull=True)
            owners |= set(active.values_list("owner_id", flat=True))
            revoked += active.update(revoked_at=now)
            level = set(
                ApiKey.objects.filter(created_by_key__in=level)
                .exclude(pk__in=seen)
                .values_list("pk", flat=True)
            )
            seen |= level
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
