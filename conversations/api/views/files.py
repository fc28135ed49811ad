"""`files/`: the caller's uploaded files: upload (multipart `file`), list, read, download,
delete. The type is decided from the bytes; the limits of conversations.services.files
apply while the upload streams."""

from collections.abc import Iterable

from django.http import FileResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.negotiation import BaseContentNegotiation
from rest_framework.parsers import BaseParser, MultiPartParser
from rest_framework.renderers import BaseRenderer
from rest_framework.request import Request
from rest_framework.response import Response

from conversations import selectors, services
from conversations.api.base import ApiView, int_param, page_response
from conversations.api.serializers import page_of
from conversations.errors import Problem, ValidationFailed
from conversations.file_responses import file_response
from conversations.models import StoredFile
from conversations.serializers import file_payload
from conversations.uploads import FIELD, StagedUpload, StagedUploadView


class FileOut(serializers.Serializer):
    id = serializers.UUIDField()
    filename = serializers.CharField()
    content_type = serializers.CharField(help_text="Decided from the bytes at upload.")
    size = serializers.IntegerField(help_text="Bytes.")
    sha256 = serializers.CharField()
    created_at = serializers.DateTimeField()
    width = serializers.IntegerField(required=False, help_text="Images only.")
    height = serializers.IntegerField(required=False, help_text="Images only.")


FilePage = page_of(FileOut, "FilePage")

UPLOAD_REQUEST = {
    "multipart/form-data": {
        "type": "object",
        "properties": {FIELD: {"type": "string", "format": "binary"}},
        "required": [FIELD],
    }
}
UPLOAD_DESCRIPTION = (
    "Send the file as the multipart field `file`. Its type is decided from its bytes, "
    "never from its name or Content-Type: PNG, JPEG, GIF, WebP, PDF, and UTF-8 text "
    "(plain, Markdown, CSV, JSON; the name's extension only tells Markdown and CSV from "
    "plain text). Others are refused with 415 `unsupported_file_type` (SVG and HTML among "
    "them). A file over the size limit is refused with 413 `file_too_large` as soon as it "
    "passes the limit; an image over the pixel limit with 400 `image_too_large`; a file "
    "that would pass your storage quota with 413 `file_quota_exceeded`. Nothing is stored "
    "on a refusal. The same bytes uploaded again answer 200 with the file already stored "
    "(under its first name), so a retry needs no Idempotency-Key."
)


def _file(request: Request, file_id: str) -> StoredFile:
    return selectors.file_get(user=request.user, file_id=file_id)  # type: ignore[arg-type]


class FileListView(StagedUploadView, ApiView):
    parser_classes = [MultiPartParser]

    @extend_schema(
        operation_id="files_list",
        summary="List your files",
        description="Newest first, cursor-paginated.",
        parameters=[
            OpenApiParameter("cursor", str, description="The `next` link's cursor."),
            OpenApiParameter("limit", int, description="1..200, default 50."),
        ],
        responses=FilePage,
    )
    def get(self, request: Request) -> Response:
        page = selectors.file_list(
            user=request.user,  # type: ignore[arg-type]
            cursor=request.query_params.get("cursor") or None,
            limit=min(int_param(request, "limit", 50, minimum=1), selectors.MAX_PAGE),
        )
        return page_response(
            request,
            [file_payload(f) for f in page.items],
            {"cursor": page.next_cursor} if page.next_cursor else None,
        )

    @extend_schema(
        operation_id="files_upload",
        summary="Upload a file",
        description=UPLOAD_DESCRIPTION,
        request=UPLOAD_REQUEST,
        parameters=[
            OpenApiParameter(
                "Idempotency-Key",
                str,
                OpenApiParameter.HEADER,
                description="Not needed here, and ignored: the same bytes give the same file.",
            )
        ],
        responses={
            201: FileOut,
            200: OpenApiResponse(FileOut, description="These bytes were stored already."),
        },
    )
    def post(self, request: Request) -> Response:
        upload = request.FILES.get(FIELD)
        if not isinstance(upload, StagedUpload):
            raise ValidationFailed(
                [Problem(f"$.{FIELD}", "is required: send the file as the multipart field")]
            )
        try:
            stored, created = services.file_store(
                owner=request.user,  # type: ignore[arg-type]
                staged=upload.staged,
                filename=upload.name or "",
            )
        finally:
            upload.close()
        return Response(file_payload(stored), status=201 if created else 200)


class FileDetailView(ApiView):
    @extend_schema(operation_id="files_get", summary="Get a file's details", responses=FileOut)
    def get(self, request: Request, file_id: str) -> Response:
        return Response(file_payload(_file(request, file_id)))

    @extend_schema(
        operation_id="files_delete",
        summary="Delete a file",
        description="The file and its bytes. A file a message uses is refused with 409 "
        "`file_in_use`.",
        responses={204: None},
    )
    def delete(self, request: Request, file_id: str) -> Response:
        services.file_delete(file=_file(request, file_id))
        return Response(status=204)


class AnyAccept(BaseContentNegotiation):
    """The file is what it is: any Accept gets it (errors are JSON all the same)."""

    def select_parser(self, request: Request, parsers: Iterable[BaseParser]) -> BaseParser | None:
        return next(iter(parsers), None)

    def select_renderer(
        self, request: Request, renderers: Iterable[BaseRenderer], format_suffix: str | None = None
    ) -> tuple[BaseRenderer, str]:
        renderer = next(iter(renderers))
        return renderer, renderer.media_type


class FileContentView(ApiView):
    content_negotiation_class = AnyAccept

    @extend_schema(
        operation_id="files_content",
        summary="Download a file's bytes",
        description="With the Content-Type decided at upload, `X-Content-Type-Options: "
        "nosniff` and a sandboxing Content-Security-Policy. Raster images are shown "
        "inline; every other file is an attachment (downloaded).",
        responses={(200, "application/octet-stream"): OpenApiTypes.BINARY},
    )
    def get(self, request: Request, file_id: str) -> FileResponse:
        return file_response(file=_file(request, file_id), request=request._request)
