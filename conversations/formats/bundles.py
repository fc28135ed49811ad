"""One conversation with its files as a ZIP: `conversation.json`, the JSON export (version
2, each message's `attachments` with their sha256), and `files/<sha256>`, the bytes of
each distinct file its messages carry (on any branch), once each.

Written as a stream (formats/zip_streams.py): the document as it is exported, then each
file's bytes read from storage a chunk at a time, so memory stays flat whatever the sizes.

Read back from a seekable file (the upload, staged on disk) with its bounds checked before
anything is unpacked: the entry count and the directory's size from the archive's end
record (before zipfile reads the directory), then the entries' declared sizes, each and
together. An entry is never unpacked past its declared size (zipfile stops there and
checks the CRC), so what the directory says is all the work there is. A file's bytes are
staged as an upload's are, within the same size limit, and must hash to the entry's name.
"""

import os
import re
import struct
import zipfile
import zlib
from collections.abc import Iterator
from types import TracebackType
from typing import IO

from django.conf import settings

from conversations.errors import (
    FILE_TOO_LARGE,
    REQUEST_TOO_LARGE,
    ParleyError,
    Problem,
    ValidationFailed,
)
from conversations.formats.exporting import export_json_chunks
from conversations.formats.zip_streams import ZipSink, zip_member
from conversations.models import Conversation
from conversations.selectors.attachments import conversation_file_pages
from conversations.services.file_staging import FileStager, StagedFile
from conversations.services.files import files_storage
from conversations.validation import storable_text

DOCUMENT = "conversation.json"
FILES = "files/"
CHUNK = 64 * 1024
# How a ZIP starts: an archive with entries, or an empty one.
SIGNATURES = (b"PK\x03\x04", b"PK\x05\x06")
SHA256 = re.compile(r"[0-9a-f]{64}")


def bundle_detect(head: bytes) -> bool:
    """Whether bytes starting with `head` are a ZIP (rather than a JSON document)."""
    return head.startswith(SIGNATURES)


# --- writing ---------------------------------------------------------------------------


def bundle_chunks(conversation: Conversation) -> Iterator[bytes]:
    """The conversation's ZIP, as byte chunks for a streamed download."""
    sink = ZipSink()
    with zipfile.ZipFile(sink, mode="w") as archive:
        with archive.open(zip_member(DOCUMENT), mode="w", force_zip64=True) as member:
            for piece in export_json_chunks(conversation):
                member.write(storable_text(piece).encode())
                if sink.full():
                    yield sink.take()
        storage = files_storage()
        for page in conversation_file_pages(conversation_id=conversation.pk):
            for sha256, name in page:
                entry = zip_member(FILES + sha256)
                with (
                    storage.open(name, "rb") as source,
                    archive.open(entry, mode="w", force_zip64=True) as member,
                ):
                    while chunk := source.read(CHUNK):
                        member.write(chunk)
                        if sink.full():
                            yield sink.take()
    yield sink.take()


# --- reading ---------------------------------------------------------------------------

_END = b"PK\x05\x06"
_END_FORMAT = "<4s4H2LH"  # signature, disks, entries here, entries, directory size, ...
_ZIP64_LOCATOR = b"PK\x06\x07"
_ZIP64_LOCATOR_FORMAT = "<4sLQL"  # signature, disk, where the zip64 end record is, disks
_ZIP64_END = b"PK\x06\x06"
_ZIP64_END_FORMAT = "<4sQ2H2L4Q"  # ..., entries here, entries, directory size, offset
# Directory bytes allowed per entry: its fixed part, a name, a zip64 field and some room.
DIRECTORY_BYTES_PER_ENTRY = 512
# What zipfile raises on a damaged or unusual archive (zlib, lzma and bz2 failures are
# among these).
_DAMAGED = (zipfile.BadZipFile, zlib.error, EOFError, OSError, NotImplementedError, ValueError)


def _invalid(message: str, path: str = "$") -> ValidationFailed:
    return ValidationFailed(
        [Problem(path, message)], message=f"The ZIP cannot be imported: {path}: {message}."
    )


def _too_large(message: str) -> ParleyError:
    return ParleyError(REQUEST_TOO_LARGE, message)


def _directory_size(file: IO[bytes]) -> tuple[int, int]:
    """The entry count and the directory's size in bytes, from the archive's end record
    (its zip64 form when the plain one overflows)."""
    file.seek(0, os.SEEK_END)
    start = max(0, file.tell() - struct.calcsize(_END_FORMAT) - 0xFFFF)
    file.seek(start)
    tail = file.read()
    at = tail.rfind(_END)
    if at < 0 or len(tail) - at < struct.calcsize(_END_FORMAT):
        raise _invalid("it is not a ZIP archive, or it was cut short")
    fields = struct.unpack(_END_FORMAT, tail[at : at + struct.calcsize(_END_FORMAT)])
    entries, size = fields[4], fields[5]
    if entries != 0xFFFF and size != 0xFFFFFFFF:
        return entries, size
    locator_size = struct.calcsize(_ZIP64_LOCATOR_FORMAT)
    if start + at < locator_size:
        raise _invalid("its zip64 end record is missing")
    file.seek(start + at - locator_size)
    locator = struct.unpack(_ZIP64_LOCATOR_FORMAT, file.read(locator_size))
    file.seek(locator[2])
    record = file.read(struct.calcsize(_ZIP64_END_FORMAT))
    if locator[0] != _ZIP64_LOCATOR or len(record) < struct.calcsize(_ZIP64_END_FORMAT):
        raise _invalid("its zip64 end record is missing")
    fields = struct.unpack(_ZIP64_END_FORMAT, record)
    if fields[0] != _ZIP64_END:
        raise _invalid("its zip64 end record is missing")
    return fields[7], fields[8]


class Bundle:
    """An uploaded ZIP, its bounds and entry names checked: `files` maps each sha256 to
    its entry. Refusals: 413 request_too_large (too many entries, too much unpacked),
    400 invalid naming the entry (not a ZIP, damaged, encrypted, a name twice, a file not
    named by a sha256, no conversation.json)."""

    def __init__(self, file: IO[bytes]) -> None:
        most: int = settings.PARLEY_IMPORT_ZIP_MAX_ENTRIES
        entries, directory = _directory_size(file)
        if entries > most or directory > most * DIRECTORY_BYTES_PER_ENTRY:
            raise _too_large(f"The ZIP holds {entries} entries; the limit is {most}.")
        try:
            self.archive = zipfile.ZipFile(file)
        except _DAMAGED as exc:
            raise _invalid(f"it cannot be read as a ZIP archive ({exc})") from None
        try:
            self._entries_check(self.archive.infolist(), most)
        except BaseException:
            self.archive.close()
            raise

    def _entries_check(self, infos: list[zipfile.ZipInfo], most: int) -> None:
        if len(infos) > most:
            raise _too_large(f"The ZIP holds {len(infos)} entries; the limit is {most}.")
        unpacked = sum(info.file_size for info in infos)
        limit: int = settings.PARLEY_IMPORT_ZIP_MAX_UNPACKED_BYTES
        if unpacked > limit:
            raise _too_large(f"The ZIP unpacks to {unpacked} bytes; the limit is {limit}.")
        problems: list[Problem] = []
        seen: set[str] = set()
        self.files: dict[str, zipfile.ZipInfo] = {}
        self.document_entry: zipfile.ZipInfo | None = None
        for info in infos:
            name = info.filename
            if name in seen:
                problems.append(Problem(name, "is in the ZIP twice"))
            elif info.flag_bits & 0x1:
                problems.append(Problem(name, "is encrypted"))
            elif name == DOCUMENT:
                self.document_entry = info
            elif name.startswith(FILES) and not info.is_dir():
                if SHA256.fullmatch(name.removeprefix(FILES)):
                    self.files[name.removeprefix(FILES)] = info
                else:
                    message = "must be named files/<the sha256 of its bytes, in lowercase hex>"
                    problems.append(Problem(name, message))
            seen.add(name)
        if self.document_entry is None and DOCUMENT not in seen:
            problems.append(Problem(DOCUMENT, "is missing: the ZIP holds no conversation"))
        if problems:
            first = problems[0]
            more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
            raise ValidationFailed(
                problems,
                message=f"The ZIP cannot be imported: {first.path}: {first.message}{more}.",
            )

    def __enter__(self) -> "Bundle":
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.archive.close()

    def _unpacked(self, info: zipfile.ZipInfo) -> Iterator[bytes]:
        try:
            with self.archive.open(info) as entry:
                while chunk := entry.read(CHUNK):
                    yield chunk
        except _DAMAGED as exc:
            raise _invalid(f"cannot be unpacked ({exc})", info.filename) from None

    def document(self) -> bytes:
        """conversation.json's bytes (at most PARLEY_IMPORT_MAX_BYTES: 413 beyond)."""
        info = self.document_entry
        assert info is not None
        limit: int = settings.PARLEY_IMPORT_MAX_BYTES
        if info.file_size > limit:
            raise _too_large(f"{DOCUMENT} is {info.file_size} bytes; the limit is {limit}.")
        return b"".join(self._unpacked(info))

    def file_stage(self, sha256: str) -> StagedFile:
        """The bytes of `files/<sha256>` staged as an upload's (413 file_too_large past
        PARLEY_FILE_MAX_BYTES), refused (400) unless they hash to the name."""
        info = self.files[sha256]
        limit: int = settings.PARLEY_FILE_MAX_BYTES
        if info.file_size > limit:
            raise ParleyError(
                FILE_TOO_LARGE,
                f"{info.filename} is {info.file_size} bytes; a file may have {limit} at most.",
            )
        stager = FileStager(limit=limit)
        try:
            for chunk in self._unpacked(info):
                stager.write(chunk)
        except BaseException:
            stager.discard()
            raise
        staged = stager.finish()
        if staged.sha256 != sha256:
            staged.close()
            message = f"its bytes have the sha256 {staged.sha256}, not the one it is named by"
            raise _invalid(message, info.filename)
        return staged
