"""`POST conversations/import/`: a conversation uploaded as Parley's JSON, a minimal
document, a fine-tuning line, or a ChatGPT export (every conversation in it)."""

from django.conf import settings
from drf_spectacular.utils import extend_schema
from rest_framework.request import Request
from rest_framework.response import Response

from conversations import services
from conversations.api import import_schema
from conversations.api.base import ApiView, idempotent
from conversations.errors import INVALID_IMPORT, ValidationFailed
from conversations.formats import chatgpt
from conversations.serializers import conversation_payload


class ImportView(ApiView):
    def body_limit(self) -> int:
        limit: int = settings.PARLEY_IMPORT_MAX_BYTES
        return limit

    @extend_schema(
        operation_id="conversations_import",
        summary="Import a conversation (or a ChatGPT export)",
        description=import_schema.DESCRIPTION,
        request=import_schema.REQUEST,
        responses={201: import_schema.CREATED},
    )
    @idempotent
    def post(self, request: Request) -> Response:
        owner = request.user
        if chatgpt.chatgpt_export_detect(request.body):
            report = services.conversations_import_chatgpt(owner=owner, document=request.body)  # type: ignore[arg-type]
            if not report.imported:
                raise ValidationFailed(
                    report.problems(),
                    INVALID_IMPORT,
                    message=report.summary(),
                    details=report.payload(),
                )
            return Response(report.payload(), status=201)
        conversation = services.conversation_import(owner=owner, document=request.body)  # type: ignore[arg-type]
        return Response(conversation_payload(conversation), status=201)
