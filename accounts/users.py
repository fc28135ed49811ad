"""Writes for user accounts: making one under the username rule (accounts.usernames), and
the demo account."""

from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction

from accounts.models import User
from accounts.usernames import SIMILAR_USERNAME_CODE, SIMILAR_USERNAME_MESSAGE


def user_create(
    *,
    username: str,
    password: str | None,
    email: str = "",
    is_staff: bool = False,
    is_superuser: bool = False,
) -> User:
    """A new account. ValidationError when the name, or one that looks like it, is taken,
    also when another request took it since the caller's form was checked."""
    try:
        with transaction.atomic():
            return User.objects.create_user(
                username=username,
                email=email,
                password=password,
                is_staff=is_staff,
                is_superuser=is_superuser,
            )
    except IntegrityError:
        # The name and its key are the only unique columns a new account fills.
        raise ValidationError(SIMILAR_USERNAME_MESSAGE, code=SIMILAR_USERNAME_CODE) from None


def demo_user_ensure(*, username: str, password: str) -> tuple[User, bool]:
    """The demo account, made or reset (active, staff and superuser, so it opens the admin
    too); True when made. Only the exact name is reset: an account whose name merely looks
    like it is someone else's, and ValidationError says so."""
    user = User.objects.filter(username=username).first()
    if user is None:
        return user_create(
            username=username, password=password, is_staff=True, is_superuser=True
        ), True
    user.is_staff = True
    user.is_superuser = True
    user.is_active = True
    user.set_password(password)
    user.save()
    return user, False
