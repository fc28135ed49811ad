"""Receivers that only hand over to accounts.sockets and accounts.login_guard: Django
announces log-ins, log-outs, user saves and deleted sessions as signals,
and every path (views, admin, the API's password path, shell, management commands)
sends them."""

from typing import Any

from django.contrib.auth.signals import user_logged_in, user_logged_out
from django.contrib.sessions.models import Session
from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver
from django.http import HttpRequest

from accounts.login_guard import login_attempt_succeeded
from accounts.models import ApiKey, User
from accounts.sockets import session_sockets_close, user_sockets_recheck


@receiver(user_logged_out)
def _logged_out(sender: Any, request: HttpRequest, user: User | None, **kwargs: Any) -> None:
    if user is not None:
        session = getattr(request, "session", None)
        user_sockets_recheck(
            user_id=user.pk, ended_session=getattr(session, "session_key", "") or ""
        )


# What a socket's credential depends on; a save naming only other fields (the last
# log-in time, at every log-in) cannot end one.
_CREDENTIAL_FIELDS = frozenset({"password", "is_active"})


@receiver(post_save, sender=User)
@receiver(post_delete, sender=User)
def _user_changed(sender: Any, instance: User, **kwargs: Any) -> None:
    # A password, an active flag or the user itself may have gone: the sockets check.
    update_fields = kwargs.get("update_fields")
    if update_fields is None or _CREDENTIAL_FIELDS & set(update_fields):
        user_sockets_recheck(user_id=instance.pk)


@receiver(post_delete, sender=Session)
def _session_deleted(sender: Any, instance: Session, **kwargs: Any) -> None:
    # Log-out, flush, key rotation or a deleted row, whatever path deleted it.
    session_sockets_close(session=instance)


@receiver(post_save, sender=ApiKey)
@receiver(post_delete, sender=ApiKey)
def _key_changed(sender: Any, instance: ApiKey, **kwargs: Any) -> None:
    user_sockets_recheck(user_id=instance.owner_id)


@receiver(user_logged_in)
def _logged_in(sender: Any, request: HttpRequest, user: User, **kwargs: Any) -> None:
    # Failures are counted when a password check starts (accounts.login_guard); a
    # log-in gives the place its check took back.
    login_attempt_succeeded(request=request)
