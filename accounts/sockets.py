"""Open websockets follow their credentials: revoking a key, deactivating or deleting a
user, changing a password, logging out or a session ending in any other way (flushed,
deleted, expired) closes the sockets that credential opened.

Each socket joins its user's group; a change that may end a credential asks the group,
after the transaction commits, to check again. A socket then re-reads its own
credential and closes with 4401 when it no longer holds (other keys and sessions of the
same user stay open). Delivery is best effort, so every frame checks the credential too
(a lost notice cannot let a revoked credential act), and each socket checks again when
its session expires and every PARLEY_WS_CREDENTIAL_RECHECK_SECONDS.
"""

import asyncio
import logging
import math
import threading
from dataclasses import dataclass
from datetime import datetime
from importlib import import_module
from typing import Any
from uuid import UUID

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.conf import settings
from django.contrib.auth import HASH_SESSION_KEY, SESSION_KEY
from django.contrib.sessions.models import Session
from django.db import transaction
from django.utils import timezone
from django.utils.crypto import constant_time_compare

from accounts.models import ApiKey, User

log = logging.getLogger(__name__)

# The message a socket's consumer receives (Channels maps "auth.recheck" to auth_recheck).
RECHECK = "auth.recheck"


def user_sockets_group(user_id: int) -> str:
    return f"user.{user_id}.sockets"


def user_sockets_recheck(*, user_id: int, ended_session: str = "") -> None:
    """After commit, ask the user's open sockets to check their credentials again;
    `ended_session` names a session that is ending now (a log-out), closed at once."""
    message = {"type": RECHECK, "ended_session": ended_session}

    def send() -> None:
        layer = get_channel_layer()
        if layer is None:
            return
        try:
            async_to_sync(layer.group_send)(user_sockets_group(user_id), message)
        except Exception:
            log.warning("could not ask user %s's sockets to recheck", user_id, exc_info=True)

    def send_from_anywhere() -> None:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            send()  # no event loop in this thread: the usual case
        else:
            # Sync code on a thread that runs an event loop cannot wait on async code.
            threading.Thread(target=send, daemon=True).start()

    transaction.on_commit(send_from_anywhere)


@dataclass(frozen=True)
class SocketCredential:
    """What opened a socket: an API key, or a session (accounts.websocket)."""

    user_id: int
    api_key_id: UUID | None = None
    session_key: str | None = None


def socket_credential_valid(*, credential: SocketCredential) -> bool:
    """Whether what opened a socket still lets it act: an active user, and either the
    same unrevoked key or the same live session made before the last password change."""
    return socket_credential_seconds_left(credential=credential) is not None


def socket_credential_seconds_left(*, credential: SocketCredential) -> float | None:
    """None when the credential no longer holds (see socket_credential_valid); otherwise
    the seconds until it lapses by itself (a session's expiry), or infinity for a key."""
    user = User.objects.filter(pk=credential.user_id, is_active=True).first()
    if user is None:
        return None
    if credential.api_key_id is not None:
        live = ApiKey.objects.filter(pk=credential.api_key_id, owner=user, revoked_at__isnull=True)
        return math.inf if live.exists() else None
    if not credential.session_key:
        return None
    found = _session(credential.session_key)
    if found is None:
        return None
    data, expires_at = found
    if str(data.get(SESSION_KEY)) != str(user.pk):
        return None
    if not _session_hash_valid(user, data.get(HASH_SESSION_KEY) or ""):
        return None
    return max((expires_at - timezone.now()).total_seconds(), 0.0)


def _session(session_key: str) -> tuple[dict[str, Any], datetime] | None:
    """The live session's data and when it expires, or None when it is gone or expired."""
    store: Any = import_module(settings.SESSION_ENGINE).SessionStore(session_key)
    model = getattr(store, "model", None)
    if model is not None:
        # Database sessions keep their true expiry in a column (the store would answer
        # "now + cookie age" for a session without a custom expiry).
        row = model.objects.filter(session_key=session_key, expire_date__gt=timezone.now()).first()
        if row is None:
            return None
        return store.decode(row.session_data), row.expire_date
    data = store.load()  # empty when the session is gone or expired
    if not data:
        return None
    return data, store.get_expiry_date()


def session_sockets_close(*, session: Session) -> None:
    """A stored session was deleted (flushed, logged out, its key rotated): the sockets
    it opened close. Sessions already expired are left to the sockets' own expiry check,
    so purging old sessions sends nothing."""
    if session.expire_date <= timezone.now():
        return
    user_id = str(session.get_decoded().get(SESSION_KEY, ""))
    if user_id.isdigit():
        user_sockets_recheck(user_id=int(user_id), ended_session=session.session_key)


def _session_hash_valid(user: User, stored: str) -> bool:
    # As django.contrib.auth.get_user: the hash follows the password, and sessions made
    # under a previous SECRET_KEY still count while it is listed as a fallback.
    if constant_time_compare(stored, user.get_session_auth_hash()):
        return True
    return any(
        constant_time_compare(stored, user._get_session_auth_hash(secret=fallback))  # type: ignore[attr-defined]
        for fallback in settings.SECRET_KEY_FALLBACKS
    )
