"""The "files" storage in an S3-compatible bucket (django-storages' S3 backend), keeping no
local copy of an object either way: an upload goes from the staged temporary file by its
path (in parts, each read from disk as it is sent), and a read streams the object as it
arrives (django-storages would first download it whole into memory or a temporary file).
A read is seekable: a seek moves where the next read starts, which then asks the store for
the object from there on (a ranged GET), so readers that jump about (an image's header, a
PDF's cross-reference table at its end) work too.
"""

import io
from typing import Any

from botocore.exceptions import ClientError
from django.core.files import File
from storages.backends.s3 import S3Storage
from storages.utils import clean_name

# Bytes asked of the object's stream per read.
CHUNK = 256 * 1024


class ObjectStream(io.RawIOBase):
    """An object's bytes as a seekable raw stream over GET requests."""

    def __init__(self, *, client: Any, bucket: str, key: str) -> None:
        self._client, self._bucket, self._key = client, bucket, key
        first = self._get()
        self.size = int(first["ContentLength"])
        self._body: Any = first["Body"]
        self._body_at = 0  # where the open body's next byte is in the object
        self._position = 0

    def _get(self, start: int = 0) -> Any:
        ranged = {"Range": f"bytes={start}-"} if start else {}
        try:
            return self._client.get_object(Bucket=self._bucket, Key=self._key, **ranged)
        except ClientError as error:
            if error.response.get("ResponseMetadata", {}).get("HTTPStatusCode") == 404:
                raise FileNotFoundError(f"no such object: {self._key}") from error
            raise

    def _drop(self) -> None:
        if self._body is not None:
            self._body.close()
            self._body = None

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._position

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        # Only the position moves: the body is dropped when a read needs another place.
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._position, io.SEEK_END: self.size}[whence]
        if base + offset < 0:
            raise ValueError(f"negative seek position {base + offset}")
        self._position = base + offset
        return self._position

    def readinto(self, buffer: Any) -> int:
        if self._position >= self.size:
            return 0
        if self._body is None or self._body_at != self._position:
            self._drop()
            self._body = self._get(self._position)["Body"]
            self._body_at = self._position
        target = memoryview(buffer).cast("B")
        data = self._body.read(len(target))
        if not data:
            raise OSError(f"{self._key} ended at {self._position} of {self.size} bytes")
        target[: len(data)] = data
        self._position += len(data)
        self._body_at = self._position
        return len(data)

    def readall(self) -> bytes:
        # In large reads: the base class would read the rest a few kilobytes at a time.
        parts = []
        while part := self.read(CHUNK):
            parts.append(part)
        return b"".join(parts)

    def close(self) -> None:
        self._drop()
        super().close()


class FilesS3Storage(S3Storage):
    """S3Storage whose binary reads stream and whose uploads of a file on disk go from
    its path; everything else (names, deletes, listing) is django-storages' own."""

    def _open(self, name: str, mode: str = "rb") -> File:
        if mode != "rb":
            return super()._open(name, mode)
        key = self._normalize_name(clean_name(name))
        stream = ObjectStream(client=self.connection.meta.client, bucket=self.bucket_name, key=key)
        file = File(io.BufferedReader(stream, buffer_size=CHUNK), name)
        file.size = stream.size
        file.mode = mode
        return file

    def _save(self, name: str, content: File) -> str:
        path = getattr(content, "temporary_file_path", None)
        source = path() if callable(path) and not self.gzip else ""
        if not source:
            return super()._save(name, content)
        cleaned = clean_name(name)
        key = self._normalize_name(cleaned)
        self.bucket.Object(key).upload_file(
            source,
            ExtraArgs=self._get_write_parameters(key, content),
            Config=self.transfer_config,
        )
        return cleaned
