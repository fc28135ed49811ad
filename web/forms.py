"""Forms of the accounts pages. Validation only; the writes happen in services."""

from typing import Any

from django import forms
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth.forms import AuthenticationForm, BaseUserCreationForm

from accounts.login_guard import client_address, lock_message, login_lock_remaining
from accounts.models import User


class LockAwareLoginMixin:
    """Says plainly that the account or address is locked, and for how long, instead of
    the usual "wrong password" (which would be a lie while even the right one fails)."""

    request: Any

    def clean(self) -> Any:
        username = str(self.data.get("username", ""))  # type: ignore[attr-defined]
        remaining = login_lock_remaining(username=username, address=client_address(self.request))
        if remaining:
            raise forms.ValidationError(lock_message(remaining), code="locked")
        return super().clean()  # type: ignore[misc]


class LoginForm(LockAwareLoginMixin, AuthenticationForm):
    pass


class AdminLoginForm(LockAwareLoginMixin, AdminAuthenticationForm):
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
