"""Receivers that only hand over to accounts.sockets and accounts.login_guard: Django
announces log-ins, failed log-ins, log-outs and user saves as signals, and every path
(views, admin, the API's password path, shell, management commands) sends them."""

from typing import Any

from django.contrib.auth.signals import user_logged_in, user_logged_out, user_login_failed
from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver
from django.http import HttpRequest

from accounts.login_guard import client_address, login_failure_record, login_success_record
from accounts.models import ApiKey, User
from accounts.sockets import user_sockets_recheck


@receiver(user_logged_out)
def _logged_out(sender: Any, request: HttpRequest, user: User | None, **kwargs: Any) -> None:
    if user is not None:
        session = getattr(request, "session", None)
        user_sockets_recheck(
            user_id=user.pk, ended_session=getattr(session, "session_key", "") or ""
        )


@receiver(post_save, sender=User)
@receiver(post_delete, sender=User)
def _user_changed(sender: Any, instance: User, **kwargs: Any) -> None:
    # A password, an active flag or the user itself may have gone: the sockets check.
    user_sockets_recheck(user_id=instance.pk)


@receiver(post_save, sender=ApiKey)
@receiver(post_delete, sender=ApiKey)
def _key_changed(sender: Any, instance: ApiKey, **kwargs: Any) -> None:
    user_sockets_recheck(user_id=instance.owner_id)


@receiver(user_login_failed)
def _login_failed(
    sender: Any, credentials: dict[str, Any], request: Any = None, **kwargs: Any
) -> None:
    username = str(credentials.get("username") or "")
    login_failure_record(username=username, address=client_address(request))


@receiver(user_logged_in)
def _logged_in(sender: Any, request: HttpRequest, user: User, **kwargs: Any) -> None:
    login_success_record(username=user.get_username())
