"""The request budgets (conversations/limits.py) as DRF's throttle, the default of every
view on both API doors (/api/v1/ and /openai/v1/): every request spends the user's
budget, and a request whose method handler is declared `@model_work` spends the model's
too."""

from typing import TYPE_CHECKING, Any

from rest_framework.throttling import BaseThrottle

from conversations import limits
from conversations.errors import Throttled

if TYPE_CHECKING:  # importing these at run time would be circular (DRF loads this module)
    from rest_framework.request import Request


class RequestBudgets(BaseThrottle):
    refused: Throttled | None = None

    def allow_request(self, request: "Request", view: Any) -> bool:
        user = request.user
        ident = user.pk if user and user.is_authenticated else self.get_ident(request)
        handler = getattr(view, (request.method or "").lower(), None)
        try:
            limits.budgets_take(ident=ident, model_work=limits.makes_model_work(handler))
        except Throttled as refused:
            self.refused = refused
            return False
        return True

    def wait(self) -> float | None:
        return self.refused.wait if self.refused is not None else None


class ShareViews(BaseThrottle):
    """Reads of a shared link, per client address: `limits.SHARE_VIEWS`, on top of the
    request budgets."""

    refused: Throttled | None = None

    def allow_request(self, request: Any, view: Any) -> bool:
        try:
            limits.budget_take(limits.SHARE_VIEWS, ident=self.get_ident(request))
        except Throttled as refused:
            self.refused = refused
            return False
        return True

    def wait(self) -> float | None:
        return self.refused.wait if self.refused is not None else None
