"""Forms of the accounts pages. Validation only; the writes happen in services."""

from django import forms
from django.contrib.auth.forms import BaseUserCreationForm

from accounts.models import User


class SignupForm(BaseUserCreationForm):
    class Meta:
        model = User
        fields = ("username",)


class ApiKeyForm(forms.Form):
    name = forms.CharField(
        max_length=100,
        help_text="Something to recognise the key by, e.g. the program that uses it.",
    )
