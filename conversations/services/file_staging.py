"""An upload on its way in: written to a temporary file chunk by chunk as it arrives,
hashed and counted as it goes, and refused the moment it passes the size limit, so no
upload is ever held whole in memory and an oversized one is never read to its end."""

import contextlib
import hashlib
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO

from django.conf import settings

from conversations.errors import FILE_TOO_LARGE, ParleyError

CHUNK = 64 * 1024


@dataclass(frozen=True)
class StagedFile:
    """Bytes in a temporary file (deleted when closed), with their size and sha256."""

    file: IO[bytes]
    size: int
    sha256: str

    def close(self) -> None:
        _close(self.file)


def _close(file: IO[bytes]) -> None:
    with contextlib.suppress(FileNotFoundError):  # moved into storage: nothing to delete
        file.close()


def file_too_large(limit: int) -> ParleyError:
    return ParleyError(FILE_TOO_LARGE, f"The file is larger than {limit} bytes, the limit.")


class FileStager:
    def __init__(
        self,
        *,
        limit: int | None = None,
        too_large: Callable[[int], ParleyError] = file_too_large,
    ) -> None:
        self.limit: int = settings.PARLEY_FILE_MAX_BYTES if limit is None else limit
        # The refusal past the limit (another body than a file, such as an import, says so).
        self.too_large = too_large
        self.file: IO[bytes] = tempfile.NamedTemporaryFile(  # noqa: SIM115 (closed by its owner)
            prefix="parley-upload-", dir=settings.FILE_UPLOAD_TEMP_DIR
        )
        self.digest = hashlib.sha256()
        self.size = 0

    def write(self, chunk: bytes) -> None:
        self.size += len(chunk)
        if self.size > self.limit:
            self.discard()
            raise self.too_large(self.limit)
        self.digest.update(chunk)
        self.file.write(chunk)

    def discard(self) -> None:
        _close(self.file)

    def finish(self) -> StagedFile:
        self.file.flush()
        self.file.seek(0)
        return StagedFile(file=self.file, size=self.size, sha256=self.digest.hexdigest())


def file_stage(
    *,
    source: IO[bytes],
    limit: int | None = None,
    too_large: Callable[[int], ParleyError] = file_too_large,
) -> StagedFile:
    """A stream's bytes staged (for callers that hold a stream rather than an upload)."""
    stager = FileStager(limit=limit, too_large=too_large)
    while chunk := source.read(CHUNK):
        stager.write(chunk)
    return stager.finish()
