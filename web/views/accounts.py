"""Accounts pages: sign up, API keys. Log in, log out and password change are Django's
own views (see web/urls.py) with our templates."""

from django.conf import settings
from django.contrib import messages
from django.contrib.auth import login
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST

from accounts import selectors as account_selectors
from accounts import services as account_services
from accounts.models import ApiKey, User
from web.forms import ApiKeyForm, SignupForm
from web.security import strict_csp


@strict_csp
@never_cache
def signup(request: HttpRequest) -> HttpResponse:
    if not settings.PARLEY_SIGNUP_ENABLED:
        raise Http404("Sign-up is switched off on this server.")
    if request.user.is_authenticated:
        return redirect("web:home")
    form = SignupForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        user = form.save()
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
            owner=request.user, name=form.cleaned_data["name"]
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
    messages.success(request, f"Revoked the key “{key.name}”. Programs using it are refused now.")
    return redirect("web:api-keys")
