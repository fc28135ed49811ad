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
from typing import Any
from uuid import UUID

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.conf import settings
from django.contrib.auth import SESSION_KEY
from django.contrib.sessions.models import Session
from django.db import transaction
from django.utils import timezone
from django.utils.crypto import constant_time_compare

from accounts import socket_checks, sql
from accounts.models import ALL_SCOPES

log = logging.getLogger(__name__)

# The message a socket's consumer receives (Channels maps "auth.recheck" to auth_recheck).
RECHECK = "auth.recheck"


def user_sockets_group(user_id: int) -> str:
    return f"user.{user_id}.sockets"


def user_sockets_recheck(*, user_id: int, ended_session: str = "") -> None:
    """After commit, ask the user's open sockets to check their credentials again;
    `ended_session` names a session that is ending now (a log-out), closed at once."""
    # The user named too, for the HTTP streams' listener in all its users' groups.
    message = {"type": RECHECK, "ended_session": ended_session, "user_id": user_id}

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
    """What opened a socket: an API key, or a session (accounts.websocket), and what it
    may do (accounts.scopes: a key's scopes are fixed, a session holds them all)."""

    user_id: int
    api_key_id: UUID | None = None
    session_key: str | None = None
    scopes: frozenset[str] = ALL_SCOPES


def socket_credential_valid(*, credential: SocketCredential) -> bool:
    """Whether what opened a socket still lets it act: an active user, and either the
    same unrevoked key or the same live session made before the last password change."""
    return socket_credential_seconds_left(credential=credential) is not None


def socket_credential_seconds_left(*, credential: SocketCredential) -> float | None:
    """None when the credential no longer holds (see socket_credential_valid); otherwise
    the seconds until it lapses by itself (a session's expiry), or infinity for a key.
    Every frame asks, so each kind is one statement (accounts/sql/credentials.py)."""
    if credential.api_key_id is not None:
        live = sql.api_key_live(user_id=credential.user_id, api_key_id=credential.api_key_id)
        return math.inf if live else None
    if not credential.session_key:
        return None
    found = _session(credential.user_id, credential.session_key)
    if found is None:
        return None
    password, (named_user, stored_hash), expires_at = found
    if named_user != str(credential.user_id):
        return None
    expected = socket_checks.session_auth_hashes(user_id=credential.user_id, password=password)
    if not any(constant_time_compare(stored_hash, valid) for valid in expected):
        return None
    return max((expires_at - timezone.now()).total_seconds(), 0.0)


def _session(user_id: int, session_key: str) -> tuple[str, tuple[str, Any], datetime] | None:
    """The active user's password hash, whom the live session names with which session
    auth hash, and when it expires; None when the user or the session is gone or expired."""
    store_class = socket_checks.session_store_class(settings.SESSION_ENGINE)
    get_model_class = getattr(store_class, "get_model_class", None)
    if get_model_class is not None:
        # Database sessions keep their true expiry in a column (the store would answer
        # "now + cookie age" for a session without a custom expiry).
        row = sql.user_session_read(
            user_id=user_id, session_key=session_key, session_model=get_model_class()
        )
        if row is None:
            return None
        password, session_data, expires_at = row
        claims = socket_checks.decoded_session_claims(
            store_class=store_class, session_data=session_data
        )
        return None if claims is None else (password, claims, expires_at)
    user_password = socket_checks.user_password(user_id=user_id)
    if user_password is None:
        return None
    store = store_class(session_key)
    data = store.load()  # empty when the session is gone or expired
    if not data:
        return None
    return user_password, socket_checks.session_claims(data), store.get_expiry_date()


def session_sockets_close(*, session: Session) -> None:
    """A stored session was deleted (flushed, logged out, its key rotated): the sockets
    it opened close. Sessions already expired are left to the sockets' own expiry check,
    so purging old sessions sends nothing."""
    if session.expire_date <= timezone.now():
        return
    user_id = str(session.get_decoded().get(SESSION_KEY, ""))
    if user_id.isdigit():
        user_sockets_recheck(user_id=int(user_id), ended_session=session.session_key)
