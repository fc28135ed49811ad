"""`POST conversations/import/`: a conversation uploaded as Parley's JSON, a minimal
document, a fine-tuning line, a ChatGPT export (every conversation in it), or a ZIP export
with the files its messages carry.

A ZIP comes as the multipart field `file` or as the raw body (`application/zip`); either
streams to a temporary file as it arrives, refused the moment it passes
PARLEY_IMPORT_ZIP_MAX_BYTES, and is read from there (a JSON document sent the same ways
is read as a JSON body is)."""

import io
from collections.abc import Mapping
from typing import IO, Any

from django.conf import settings
from django.http import HttpRequest
from drf_spectacular.utils import extend_schema
from rest_framework.parsers import BaseParser, MultiPartParser
from rest_framework.request import Request
from rest_framework.response import Response

from accounts.models import User
from conversations import services
from conversations.api import import_schema
from conversations.api.base import ApiView, idempotent
from conversations.api.parsers import StrictJSONParser
from conversations.errors import (
    INVALID_IMPORT,
    REQUEST_TOO_LARGE,
    ParleyError,
    Problem,
    ValidationFailed,
)
from conversations.formats import bundles, chatgpt
from conversations.models import Conversation
from conversations.serializers import conversation_payload
from conversations.uploads import FIELD, StagedUpload, StagingUploadHandler

MULTIPART = "multipart/form-data"
# Bodies staged as they arrive rather than read whole (with multipart).
STREAMED_TYPES = frozenset(
    {"application/zip", "application/x-zip-compressed", "application/octet-stream"}
)


def _import_too_large(limit: int) -> ParleyError:
    return ParleyError(REQUEST_TOO_LARGE, f"The import is larger than {limit} bytes, the limit.")


def _zip_limit() -> int:
    limit: int = settings.PARLEY_IMPORT_ZIP_MAX_BYTES
    return limit


class ImportUploadHandler(StagingUploadHandler):
    """The multipart `file`, staged within the import's limit."""

    def byte_limit(self) -> int:
        return _zip_limit()

    def too_large(self, limit: int) -> ParleyError:
        return _import_too_large(limit)


class _UnreadParser(BaseParser):
    """Any other body is left unread here (the view reads or stages it itself), so a
    session's CSRF check, which asks for the form fields, parses nothing."""

    media_type = "*/*"

    def parse(
        self,
        stream: IO[Any],
        media_type: str | None = None,
        parser_context: Mapping[str, Any] | None = None,
    ) -> Any:
        return {}


def _media_type(request: HttpRequest | Request) -> str:
    return str(request.META.get("CONTENT_TYPE", "")).split(";")[0].strip().lower()


class ImportView(ApiView):
    parser_classes = [StrictJSONParser, MultiPartParser, _UnreadParser]

    def _streamed(self) -> bool:
        kind = _media_type(self.request)
        return self.request.method == "POST" and (kind == MULTIPART or kind in STREAMED_TYPES)

    def body_limit(self) -> int | None:
        if self._streamed():
            return None  # staged as it arrives, within PARLEY_IMPORT_ZIP_MAX_BYTES
        limit: int = settings.PARLEY_IMPORT_MAX_BYTES
        return limit

    def initialize_request(self, request: HttpRequest, *args: Any, **kwargs: Any) -> Request:
        if request.method == "POST" and _media_type(request) == MULTIPART:
            request.upload_handlers = [ImportUploadHandler(request)]
        return super().initialize_request(request, *args, **kwargs)

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        super().initial(request, *args, **kwargs)
        if not self._streamed():
            return
        if _media_type(request) == MULTIPART:
            upload = request.FILES.get(FIELD)
            if not isinstance(upload, StagedUpload):
                raise ValidationFailed(
                    [Problem(f"$.{FIELD}", "is required: send the export as the multipart field")]
                )
            request.staged_body = upload.staged  # type: ignore[attr-defined]
            return
        limit = _zip_limit()
        if int(request.META.get("CONTENT_LENGTH") or 0) > limit:
            raise _import_too_large(limit)
        staged = services.file_stage(
            source=request._request,  # type: ignore[arg-type]
            limit=limit,
            too_large=_import_too_large,
        )
        request.staged_body = staged  # type: ignore[attr-defined]

    def finalize_response(self, request: Request, response: Any, *args: Any, **kwargs: Any) -> Any:
        staged = getattr(request, "staged_body", None)
        if staged is not None:
            staged.close()
        return super().finalize_response(request, response, *args, **kwargs)

    @extend_schema(
        operation_id="conversations_import",
        summary="Import a conversation (or a ChatGPT export)",
        description=import_schema.DESCRIPTION,
        request=import_schema.REQUEST,
        responses={201: import_schema.CREATED},
    )
    @idempotent
    def post(self, request: Request) -> Response:
        owner: User = request.user  # type: ignore[assignment]
        staged = getattr(request, "staged_body", None)
        if staged is None:
            return _document_import(owner, request.body)
        staged.file.seek(0)
        if bundles.bundle_detect(staged.file.read(len(bundles.SIGNATURES[0]))):
            staged.file.seek(0)
            conversation = services.conversation_import_bundle(owner=owner, archive=staged.file)
            return Response(conversation_payload(conversation), status=201)
        limit: int = settings.PARLEY_IMPORT_MAX_BYTES
        if staged.size > limit:
            raise ParleyError(
                REQUEST_TOO_LARGE, f"The document is {staged.size} bytes; the limit is {limit}."
            )
        staged.file.seek(0)
        return _document_import(owner, staged.file.read())


def _document_import(owner: User, document: bytes) -> Response:
    """A JSON document (or a ZIP sent as an ordinary body, within the JSON limit)."""
    if bundles.bundle_detect(document[: len(bundles.SIGNATURES[0])]):
        conversation: Conversation = services.conversation_import_bundle(
            owner=owner, archive=io.BytesIO(document)
        )
        return Response(conversation_payload(conversation), status=201)
    if chatgpt.chatgpt_export_detect(document):
        report = services.conversations_import_chatgpt(owner=owner, document=document)
        if not report.imported:
            raise ValidationFailed(
                report.problems(),
                INVALID_IMPORT,
                message=report.summary(),
                details=report.payload(),
            )
        return Response(report.payload(), status=201)
    conversation = services.conversation_import(owner=owner, document=document)
    return Response(conversation_payload(conversation), status=201)
