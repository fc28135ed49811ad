"""Forms of the accounts pages. Validation only; the writes happen in services."""

from typing import Any

from django import forms
from django.contrib.admin.forms import AdminAuthenticationForm, AdminPasswordChangeForm
from django.contrib.auth.forms import (
    AuthenticationForm,
    BaseUserCreationForm,
    PasswordChangeForm,
)

from accounts.login_guard import (
    client_address,
    lock_message,
    login_attempt_begin,
    login_attempt_refund,
    login_lock_remaining,
)
from accounts.models import Scope, User
from accounts.services import DEFAULT_SCOPES


class LockAwareLoginMixin:
    """Says plainly that the account or address is locked, and for how long, instead of
    the usual "wrong password" (which would be a lie while even the right one fails).
    `lock_seconds` tells the view to answer 429 with Retry-After."""

    request: Any
    lock_seconds = 0

    def clean(self) -> Any:
        username = str(self.data.get("username", ""))  # type: ignore[attr-defined]
        address = client_address(self.request)
        self._refuse_if_locked(username, address)
        try:
            return super().clean()  # type: ignore[misc]
        except forms.ValidationError:
            # This very attempt may have started the lock.
            self._refuse_if_locked(username, address)
            raise

    def _refuse_if_locked(self, username: str, address: str) -> None:
        self.lock_seconds = login_lock_remaining(username=username, address=address)
        if self.lock_seconds:
            raise forms.ValidationError(lock_message(self.lock_seconds), code="locked")


class LoginForm(LockAwareLoginMixin, AuthenticationForm):
    pass


class AdminLoginForm(LockAwareLoginMixin, AdminAuthenticationForm):
    pass


class OldPasswordGuardMixin:
    """The current password asked when changing it is one more door for guessing it (from
    a session left open): it counts against the account's cap like a log-in."""

    user: Any
    lock_seconds = 0

    def clean_old_password(self) -> str:
        username = self.user.get_username()
        self.lock_seconds = login_attempt_begin(username=username, address="")
        if self.lock_seconds:
            raise forms.ValidationError(lock_message(self.lock_seconds), code="locked")
        try:
            old_password: str = super().clean_old_password()  # type: ignore[misc]
        except forms.ValidationError:
            self.lock_seconds = login_lock_remaining(username=username, address="")
            if self.lock_seconds:
                raise forms.ValidationError(
                    lock_message(self.lock_seconds), code="locked"
                ) from None
            raise
        login_attempt_refund(username=username, address="")
        return old_password


class GuardedPasswordChangeForm(OldPasswordGuardMixin, PasswordChangeForm):
    pass


class GuardedAdminPasswordChangeForm(OldPasswordGuardMixin, AdminPasswordChangeForm):
    pass


class SignupForm(BaseUserCreationForm):
    class Meta:
        model = User
        fields = ("username",)


class ApiKeyForm(forms.Form):
    name = forms.CharField(
        max_length=100,
        help_text="Something to recognise the key by, e.g. the program that uses it.",
    )
    scopes = forms.MultipleChoiceField(
        choices=Scope.choices,
        initial=sorted(DEFAULT_SCOPES),
        widget=forms.CheckboxSelectMultiple,
        error_messages={"required": "Choose at least one scope."},
        help_text="What programs using the key may do. Give only what they need.",
    )
