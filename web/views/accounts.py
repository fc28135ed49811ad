"""Accounts pages: sign up, API keys. Log in, log out and password change are Django's
own views (see web/urls.py) with our templates and forms."""

import functools
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.contrib import admin, messages
from django.contrib.auth import login
from django.contrib.auth.decorators import login_required
from django.contrib.auth.views import PasswordChangeView
from django.core.exceptions import ValidationError
from django.http import Http404, HttpRequest, HttpResponse
from django.http.response import HttpResponseBase
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST

from accounts import selectors as account_selectors
from accounts import services as account_services
from accounts.models import ApiKey, User
from accounts.users import user_create
from web.forms import ApiKeyForm, GuardedAdminPasswordChangeForm, SignupForm
from web.security import strict_csp


def login_lock_status(view: Callable[..., HttpResponseBase]) -> Callable[..., HttpResponseBase]:
    """A password form refused because the account or address is locked answers 429 with
    Retry-After (the page itself says so in words), for the web's and the admin's log-in
    and the password change alike."""

    @functools.wraps(view)
    def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        response = view(request, *args, **kwargs)
        form = (getattr(response, "context_data", None) or {}).get("form")
        seconds = getattr(form, "lock_seconds", 0)
        if seconds:
            response.status_code = 429
            response["Retry-After"] = str(seconds)
        return response

    return wrapped


def admin_password_change(request: HttpRequest) -> HttpResponseBase:
    """The admin's own password change page, with the guarded form (the admin's view
    names its form class itself)."""
    request.current_app = admin.site.name
    return PasswordChangeView.as_view(
        form_class=GuardedAdminPasswordChangeForm,
        success_url=reverse("admin:password_change_done"),
        extra_context=admin.site.each_context(request),
    )(request)


@strict_csp
@never_cache
def signup(request: HttpRequest) -> HttpResponse:
    if not settings.PARLEY_SIGNUP_ENABLED:
        raise Http404("Sign-up is switched off on this server.")
    if request.user.is_authenticated:
        return redirect("web:home")
    form = SignupForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            user = user_create(
                username=form.cleaned_data["username"], password=form.cleaned_data["password1"]
            )
        except ValidationError as error:  # the name was taken since the form's check
            form.add_error("username", error)
        else:
            login(request, user, backend="django.contrib.auth.backends.ModelBackend")
            return redirect("web:home")
    return render(request, "web/signup.html", {"form": form})


@strict_csp
@never_cache
@login_required
def api_keys(request: HttpRequest) -> HttpResponse:
    """List keys; a POST creates one and shows its secret on this one response only."""
    assert isinstance(request.user, User)
    form = ApiKeyForm(request.POST or None)
    secret = None
    if request.method == "POST" and form.is_valid():
        _, secret = account_services.api_key_create(
            owner=request.user, name=form.cleaned_data["name"], scopes=form.cleaned_data["scopes"]
        )
        form = ApiKeyForm()
    keys = account_selectors.api_key_list(owner=request.user)
    return render(request, "web/api_keys.html", {"form": form, "keys": keys, "secret": secret})


@require_POST
@login_required
def api_key_revoke(request: HttpRequest, key_id: str) -> HttpResponse:
    assert isinstance(request.user, User)
    try:
        key = account_selectors.api_key_get(owner=request.user, key_id=key_id)
    except ApiKey.DoesNotExist:
        raise Http404("No such API key.") from None
    account_services.api_key_revoke(api_key=key)
    messages.success(
        request,
        f"Revoked the key “{key.name}” and the keys it created. Programs using them are "
        "refused now.",
    )
    return redirect("web:api-keys")
