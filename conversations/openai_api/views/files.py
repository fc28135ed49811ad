"""Files: upload (multipart `file` and `purpose`), list, retrieve, the bytes, delete.

The same store as `/api/v1/files/` through the same upload handler: the type decided from
the bytes, the size refused as the upload streams, the same bytes of one user stored once,
the quota. Parley keeps no purpose: every file is the user's data, named `user_data`
whatever it was uploaded for (the purposes a file sent to a model comes with are taken).
"""

from collections.abc import Mapping
from typing import IO, Any, cast

from django.http import FileResponse
from rest_framework.exceptions import ParseError
from rest_framework.parsers import MultiPartParser
from rest_framework.request import Request
from rest_framework.response import Response

from accounts.models import User
from conversations import selectors, services
from conversations.file_responses import file_response
from conversations.models import StoredFile
from conversations.openai_api import ids
from conversations.openai_api.base import OpenAIView, choice_param, limit_param
from conversations.openai_api.errors import invalid, quoted
from conversations.openai_api.file_parts import file_not_found
from conversations.openai_api.objects import file_object
from conversations.uploads import FIELD, StagedUpload, StagedUploadView

PURPOSES = ("user_data", "assistants", "vision")
# The form's fields besides the file: `expires_after[...]` asks for an end Parley does not
# set (a file no message uses is swept, which `expires_at` says).
_FORM_FIELDS = {"purpose"}
_FORM_PREFIXES = ("expires_after",)
LIST_MAX = 10_000


def _file(request: Request, raw_id: str) -> StoredFile:
    """The requesting user's file: 404 for unknown, malformed and others' ids alike."""
    key = ids.file_key(raw_id)
    try:
        if key is None:
            raise StoredFile.DoesNotExist
        return selectors.file_get(user=cast(User, request.user), file_id=key)
    except StoredFile.DoesNotExist:
        raise file_not_found(raw_id, param="file_id") from None


def _purpose(request: Request) -> None:
    for name in request.data:
        if name != FIELD and name not in _FORM_FIELDS and not name.startswith(_FORM_PREFIXES):
            raise invalid(
                f"Unknown parameter: '{quoted(name)}'.",
                param=quoted(name),
                code="unknown_parameter",
            )
    purpose = request.data.get("purpose")
    if not purpose:
        raise invalid(
            "Missing required parameter: 'purpose'.",
            param="purpose",
            code="missing_required_parameter",
        )
    if purpose not in PURPOSES:
        raise invalid(
            f"Invalid 'purpose': {quoted(purpose)!r} is not taken here; files are for "
            f"models to read: {', '.join(PURPOSES)}.",
            param="purpose",
            code="unsupported_value",
        )


class UploadParser(MultiPartParser):
    """A multipart body; any other is refused saying what to send."""

    def parse(
        self,
        stream: IO[Any],
        media_type: str | None = None,
        parser_context: Mapping[str, Any] | None = None,
    ) -> Any:
        try:
            return super().parse(stream, media_type, parser_context)
        except ParseError:
            raise invalid(
                f"Send a multipart/form-data body: the file as '{FIELD}', with 'purpose'.",
                param=FIELD,
            ) from None


class FilesView(StagedUploadView, OpenAIView):
    parser_classes = [UploadParser]

    def get(self, request: Request) -> Response:
        """OpenAI's list: `after` (a file id), `limit` (1 to 10,000; a page holds at most
        selectors.MAX_PAGE, and says there are more), `order` (desc by default), and
        `purpose` (every file here is `user_data`)."""
        limit = limit_param(request, default=LIST_MAX, maximum=LIST_MAX)
        order = choice_param(request, "order", choices=("asc", "desc"), default="desc")
        purpose = request.query_params.get("purpose") or None
        if purpose is not None and purpose != "user_data":
            return Response(_file_list([], has_more=False))
        user = cast(User, request.user)
        cursor = None
        after = request.query_params.get("after") or None
        if after is not None:
            key = ids.file_key(after)
            found = selectors.files_by_id(user=user, file_ids=[key] if key else [])
            if key not in found:
                raise invalid(f"Invalid 'after': no file with id '{quoted(after)}'.", param="after")
            cursor = selectors.file_cursor(found[key])
        page = selectors.file_list(
            user=user,
            cursor=cursor,
            limit=min(limit, selectors.MAX_PAGE),
            oldest_first=order == "asc",
        )
        return Response(_file_list(page.items, has_more=page.next_cursor is not None))

    def post(self, request: Request) -> Response:
        upload = request.FILES.get(FIELD)
        try:
            _purpose(request)
            if not isinstance(upload, StagedUpload):
                raise invalid(
                    f"Missing required parameter: '{FIELD}' (send it as a multipart file).",
                    param=FIELD,
                    code="missing_required_parameter",
                )
            stored, _ = services.file_store(
                owner=cast(User, request.user), staged=upload.staged, filename=upload.name or ""
            )
        finally:
            if isinstance(upload, StagedUpload):
                upload.close()
        return Response(file_object(stored))


def _file_list(files: list[StoredFile], *, has_more: bool) -> dict[str, Any]:
    data = [file_object(file) for file in files]
    return {
        "object": "list",
        "data": data,
        # Strings by OpenAI's schema, as an item list's: empty for an empty list.
        "first_id": data[0]["id"] if data else "",
        "last_id": data[-1]["id"] if data else "",
        "has_more": has_more,
    }


class FileView(OpenAIView):
    def get(self, request: Request, file_id: str) -> Response:
        return Response(file_object(_file(request, file_id)))

    def delete(self, request: Request, file_id: str) -> Response:
        """A file a message still uses is refused (409 `file_in_use`): its message, or its
        conversation, goes first."""
        file = _file(request, file_id)
        shown = ids.file_id(file.pk)
        services.file_delete(file=file)
        return Response({"id": shown, "object": "file", "deleted": True})


class FileContentView(OpenAIView):
    def get(self, request: Request, file_id: str) -> FileResponse:
        """The bytes, with the headers every door serves a file with."""
        return file_response(file=_file(request, file_id), request=request._request)
