"""The permission every view of /api/v1/ and /openai/v1/ goes through: an authenticated
caller whose credential holds the scope the view needs (accounts.scopes).

A view names its scope as `required_scope`; without one, reading methods need `read`
and the others `chat`. A refusal raises ScopeMissing, which every door renders as 403
`insufficient_scope`.
"""

from typing import Any

from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request

from accounts.models import ApiKey
from accounts.scopes import scope_for_method, scope_require, scopes_held


def view_scope(view: Any, method: str) -> str:
    """The scope a request of `method` to `view` needs."""
    declared: str | None = getattr(view, "required_scope", None)
    return declared or scope_for_method(method)


def request_key(request: Request) -> ApiKey | None:
    """The API key the request came with; None for a session or a password."""
    return request.auth if isinstance(request.auth, ApiKey) else None


class ScopedPermission(IsAuthenticated):
    def has_permission(self, request: Request, view: Any) -> bool:
        if not super().has_permission(request, view):
            return False  # DRF answers 401 not_authenticated
        held = scopes_held(api_key=request_key(request))
        scope_require(held=held, required=view_scope(view, request.method or "GET"))
        return True
