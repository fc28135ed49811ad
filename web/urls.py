from django.contrib.auth import views as auth_views
from django.urls import path, reverse_lazy

from web.forms import GuardedPasswordChangeForm, LoginForm
from web.security import strict_csp
from web.views import accounts, chat, shared, shares

app_name = "web"

urlpatterns = [
    path("", chat.home, name="home"),
    path("chat/", chat.chat, name="chat"),
    path("chat/<uuid:conversation_id>/", chat.chat, name="conversation"),
    path("s/<str:token>/", shared.shared, name="shared"),
    path("shares/", shares.shares, name="shares"),
    path("accounts/signup/", accounts.signup, name="signup"),
    path(
        "accounts/password/",
        strict_csp(
            accounts.login_lock_status(
                auth_views.PasswordChangeView.as_view(
                    template_name="web/password_change.html",
                    success_url=reverse_lazy("web:password-done"),
                    form_class=GuardedPasswordChangeForm,
                )
            )
        ),
        name="password-change",
    ),
    path(
        "accounts/password/done/",
        strict_csp(
            auth_views.PasswordChangeDoneView.as_view(template_name="web/password_done.html")
        ),
        name="password-done",
    ),
    path("accounts/api-keys/", accounts.api_keys, name="api-keys"),
    path("accounts/api-keys/<uuid:key_id>/revoke/", accounts.api_key_revoke, name="api-key-revoke"),
]

# Log in and out keep Django's plain names ("login", "logout"): LOGIN_URL and the
# admin's templates refer to them.
auth_urlpatterns = [
    path(
        "accounts/login/",
        strict_csp(
            accounts.login_lock_status(
                auth_views.LoginView.as_view(
                    template_name="web/login.html",
                    redirect_authenticated_user=True,
                    authentication_form=LoginForm,
                )
            )
        ),
        name="login",
    ),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
]
