"""ZIP archives written as byte streams with flat memory: the standard library's zipfile
writes into a sink that hands out the bytes written so far. zipfile streams to an
unseekable file by putting each member's sizes in a data descriptor after its bytes."""

import io
import zipfile
from datetime import datetime
from typing import Any

from django.utils import timezone

# Bytes gathered before a piece is handed to the response.
FLUSH_BYTES = 64 * 1024


class ZipSink(io.RawIOBase):
    """An unseekable file that collects written bytes until they are taken."""

    def __init__(self) -> None:
        self.parts: list[bytes] = []
        self.size = 0
        self.position = 0

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        chunk = bytes(data)
        self.parts.append(chunk)
        self.size += len(chunk)
        self.position += len(chunk)
        return len(chunk)

    def tell(self) -> int:
        return self.position

    def take(self) -> bytes:
        data = b"".join(self.parts)
        self.parts, self.size = [], 0
        return data

    def full(self) -> bool:
        """Whether enough has gathered to be handed on."""
        return self.size >= FLUSH_BYTES


def zip_member(name: str, *, when: datetime | None = None) -> zipfile.ZipInfo:
    """A compressed member named `name`, dated `when` (now by default; ZIP times are local
    and have no zone)."""
    moment = timezone.localtime(when or timezone.now())
    info = zipfile.ZipInfo(name, date_time=moment.timetuple()[:6])
    info.compress_type = zipfile.ZIP_DEFLATED
    info.external_attr = 0o644 << 16  # read-write for its owner, readable by others
    return info
