"""`GET tools/`: the tools a conversation may enable, with their JSON schemas: the
built-ins, then the tools of the tool servers open to the caller (`<server>__<tool>`)."""

from drf_spectacular.utils import extend_schema
from rest_framework.request import Request
from rest_framework.response import Response

from conversations.api import serializers as s
from conversations.api.base import ApiView, page_response
from conversations.tools.registry import tool_catalog


class ToolListView(ApiView):
    @extend_schema(
        operation_id="tools_list", summary="Tools the model can use", responses=s.ToolPage
    )
    def get(self, request: Request) -> Response:
        return page_response(request, tool_catalog(user=request.user), None)  # type: ignore[arg-type]
