"""The upload door's body: a multipart request whose one file field, `file`, streams to
a staged file (conversations.services.file_staging) as it arrives, never into memory, and
is refused the moment it passes the size limit, before the rest is read."""

from typing import Any

from django.conf import settings
from django.core.files.uploadedfile import UploadedFile
from django.core.files.uploadhandler import FileUploadHandler
from django.http import HttpRequest

from conversations.errors import ParleyError, Problem, ValidationFailed
from conversations.services import FileStager, StagedFile
from conversations.services.file_staging import file_too_large

FIELD = "file"
# Room for the multipart envelope (boundaries, part headers, small fields) beside the file.
ENVELOPE_BYTES = 64 * 1024


class StagedUpload(UploadedFile):
    """The `file` field, staged: its bytes, size and sha256 in `staged`."""

    def __init__(self, staged: StagedFile, name: str, content_type: str | None) -> None:
        super().__init__(staged.file, name, content_type, staged.size)
        self.staged = staged

    def close(self) -> None:
        self.staged.close()


class StagingUploadHandler(FileUploadHandler):
    # The body is read in pieces this large: few enough calls for the parser's Python to
    # cost little beside hashing and writing, small enough to keep memory flat.
    chunk_size = 1024 * 1024
    stager: FileStager | None = None

    def byte_limit(self) -> int:
        """The most bytes the file may have (an import's ZIP has its own limit)."""
        limit: int = settings.PARLEY_FILE_MAX_BYTES
        return limit

    def too_large(self, limit: int) -> ParleyError:
        return file_too_large(limit)

    def handle_raw_input(
        self,
        input_data: Any,
        META: dict[str, Any],
        content_length: int,
        boundary: Any,
        encoding: str | None = None,
    ) -> None:
        # A body announced larger than any acceptable upload is refused unread.
        limit = self.byte_limit()
        if content_length > limit + ENVELOPE_BYTES:
            raise self.too_large(limit)

    def new_file(self, field_name: str, *args: Any, **kwargs: Any) -> None:
        super().new_file(field_name, *args, **kwargs)
        if field_name != FIELD or self.stager is not None:
            self.upload_interrupted()
            raise ValidationFailed(
                [Problem(f"$.{field_name}", "is not expected: send one file, as `file`")]
            )
        self.stager = FileStager(limit=self.byte_limit(), too_large=self.too_large)

    def receive_data_chunk(self, raw_data: bytes, start: int) -> None:
        assert self.stager is not None
        self.stager.write(raw_data)

    def file_complete(self, file_size: int) -> StagedUpload | None:
        assert self.stager is not None
        return StagedUpload(self.stager.finish(), self.file_name or "", self.content_type)

    def upload_interrupted(self) -> None:
        if self.stager is not None:
            self.stager.discard()


class StagedUploadView:
    """For an API view whose POST takes a multipart file (mixed in before the view class):
    the file streams to a staged temporary file through StagingUploadHandler, which
    limits it as it arrives, so the body is not limited as a whole."""

    def body_limit(self) -> int | None:
        return None

    def initialize_request(self, request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
        if request.method == "POST":
            request.upload_handlers = [StagingUploadHandler(request)]
        return super().initialize_request(request, *args, **kwargs)  # type: ignore[misc]
