"""Per-user request budgets, shared by both API doors (/api/v1/ and /openai/v1/), so a
user's requests spend one budget whichever door they use. Rates are read from settings on
each request (DRF reads them once at import), so deployments and tests can change them
without a restart."""

from typing import TYPE_CHECKING, Any

from django.conf import settings
from rest_framework.throttling import SimpleRateThrottle

if TYPE_CHECKING:  # importing these at run time would be circular (DRF loads this module)
    from rest_framework.request import Request


class _UserRateThrottle(SimpleRateThrottle):
    setting = ""

    def __init__(self) -> None:
        # Deliberately not super().__init__(): that reads the rate from DRF's frozen table.
        self.rate = self.get_rate()
        self.num_requests, self.duration = self.parse_rate(self.rate)

    def get_rate(self) -> str:
        rate: str = getattr(settings, self.setting)
        return rate

    def get_cache_key(self, request: "Request", view: Any) -> str | None:
        user = request.user
        ident = user.pk if user and user.is_authenticated else self.get_ident(request)
        return self.cache_format % {"scope": self.scope, "ident": ident}


class UserThrottle(_UserRateThrottle):
    """Every API request."""

    scope = "user"
    setting = "PARLEY_API_THROTTLE_RATE"


class ModelThrottle(_UserRateThrottle):
    """Requests that make the model work: new messages, chat, stateless chat."""

    scope = "model"
    setting = "PARLEY_API_MODEL_THROTTLE_RATE"
