"""The shared page `/s/<token>/`: a link's snapshot, read-only, for anyone holding the
link (signed-in users only, for a `signed_in` link). The messages come with the page as
JSON and are drawn by the chat's own modules (Markdown, tool cards, thoughts)."""

from django.contrib.auth.views import redirect_to_login
from django.http import HttpRequest, HttpResponse
from django.middleware.csrf import get_token
from django.shortcuts import render
from django.views.decorators.cache import never_cache

from conversations import limits, selectors, services
from conversations.errors import Throttled
from conversations.models import Share
from conversations.serializers import shared_message_payload
from conversations.throttles import ShareViews
from web.security import strict_csp

# Search engines leave shared conversations out, whoever links to them.
NOINDEX = "noindex"


def _page(request: HttpRequest, context: dict[str, object], status: int) -> HttpResponse:
    response = render(request, "web/shared.html", context, status=status)
    response["X-Robots-Tag"] = NOINDEX
    return response


@strict_csp
@never_cache
def shared(request: HttpRequest, token: str) -> HttpResponse:
    try:
        # The client's address as the API's throttles read it (from META alone).
        address = ShareViews().get_ident(request)  # type: ignore[arg-type]
        limits.budget_take(limits.SHARE_VIEWS, ident=address)
    except Throttled:
        return _page(request, {"share": None, "throttled": True}, 429)
    try:
        share = services.share_open(token=token, user=request.user)
    except Share.DoesNotExist:
        # Unknown, revoked and expired links look alike.
        return _page(request, {"share": None}, 404)
    except services.ShareNeedsSignIn:
        return redirect_to_login(request.get_full_path())
    if request.user.is_authenticated:
        get_token(request)  # "Continue in my account" posts with the CSRF cookie
    # Drawn in the browser by the chat's own transcript modules, from this JSON.
    snapshot = [shared_message_payload(row) for row in selectors.share_rows(share=share)]
    return _page(request, {"share": share, "snapshot": snapshot, "token": token}, 200)
