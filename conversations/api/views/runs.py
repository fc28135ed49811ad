"""Runs: status and cancel. Their events are served by conversations/api/sse.py."""

from drf_spectacular.utils import extend_schema
from rest_framework.request import Request
from rest_framework.response import Response

from conversations import selectors
from conversations.api import serializers as s
from conversations.api.base import ApiView, idempotent
from conversations.engine import run_cancel
from conversations.serializers import run_payload


class RunDetailView(ApiView):
    @extend_schema(operation_id="runs_read", summary="Read a run's status", responses=s.RunOut)
    def get(self, request: Request, run_id: str) -> Response:
        run = selectors.run_get_for_user(user=request.user, run_id=run_id)  # type: ignore[arg-type]
        return Response(run_payload(run))


class RunCancelView(ApiView):
    @extend_schema(
        operation_id="runs_cancel",
        summary="Cancel a run",
        description="A queued run ends at once; a running one stops at its next chunk or "
        "between tools (cooperative). Cancelling an ended run changes nothing.",
        request=None,
        responses=s.RunOut,
    )
    @idempotent
    def post(self, request: Request, run_id: str) -> Response:
        run = selectors.run_get_for_user(user=request.user, run_id=run_id)  # type: ignore[arg-type]
        s.NoFieldsIn(data=request.data).is_valid(raise_exception=True)
        return Response(run_payload(run_cancel(run=run)))
