from typing import Any

from django.conf import settings
from django.http import HttpRequest


def site(request: HttpRequest) -> dict[str, Any]:
    """Settings that change what every page offers (the sign-up link)."""
    return {"signup_enabled": settings.PARLEY_SIGNUP_ENABLED}
