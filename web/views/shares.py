"""The page of the user's share links, `/shares/`: every link of every conversation with
its conversation, audience, dates, views and state. Revoking goes through the API, as in
the chat's share dialog (web/static/web/shares.js)."""

from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.cache import never_cache
from django.views.decorators.csrf import ensure_csrf_cookie

from accounts.models import User
from conversations import selectors
from web.security import strict_csp

SHARES_PER_PAGE = 50


@strict_csp
@never_cache
@ensure_csrf_cookie
@login_required
def shares(request: HttpRequest) -> HttpResponse:
    assert isinstance(request.user, User)
    links = selectors.shares_for_user(user=request.user)
    page = Paginator(links, SHARES_PER_PAGE).get_page(request.GET.get("page"))
    rows = [(share, selectors.share_status(share)) for share in page]
    return render(request, "web/shares.html", {"page": page, "rows": rows})
