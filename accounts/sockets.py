"""Open websockets follow their credentials: revoking a key, deactivating or deleting a
user, changing a password or logging out closes the sockets that credential opened.

Each socket joins its user's group; a change that may end a credential asks the group,
after the transaction commits, to check again. A socket then re-reads its own
credential and closes with 4401 when it no longer holds (other keys and sessions of the
same user stay open). Delivery is best effort, so every frame that changes something
checks the credential too: a lost notice cannot let a revoked credential act.
"""

import asyncio
import logging
import threading
from importlib import import_module
from typing import Any
from uuid import UUID

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.conf import settings
from django.contrib.auth import HASH_SESSION_KEY, SESSION_KEY
from django.db import transaction
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


def socket_credential_valid(
    *, user_id: int, api_key_id: UUID | None, session_key: str | None
) -> bool:
    """Whether what opened a socket still lets it act: an active user, and either the
    same unrevoked key or the same live session made before the last password change."""
    user = User.objects.filter(pk=user_id, is_active=True).first()
    if user is None:
        return False
    if api_key_id is not None:
        return ApiKey.objects.filter(pk=api_key_id, owner=user, revoked_at__isnull=True).exists()
    if not session_key:
        return False
    store: Any = import_module(settings.SESSION_ENGINE).SessionStore(session_key)
    data = store.load()  # empty when the session is gone or expired
    if str(data.get(SESSION_KEY)) != str(user.pk):
        return False
    return _session_hash_valid(user, data.get(HASH_SESSION_KEY) or "")


def _session_hash_valid(user: User, stored: str) -> bool:
    # As django.contrib.auth.get_user: the hash follows the password, and sessions made
    # under a previous SECRET_KEY still count while it is listed as a fallback.
    if constant_time_compare(stored, user.get_session_auth_hash()):
        return True
    return any(
        constant_time_compare(stored, user._get_session_auth_hash(secret=fallback))  # type: ignore[attr-defined]
        for fallback in settings.SECRET_KEY_FALLBACKS
    )
