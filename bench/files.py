"""Uploads: a file through `POST /api/v1/files/` against copying it on disk, and the memory
an upload takes.

Each upload goes through Django's request handling as a WSGI server calls it, the body
read from the source file as the handler asks for it, with an API key; the copy is
`shutil.copyfile` of the same file to the same disk (in the kernel), and beside it the
least an upload must do: read the bytes, hash them (sha256) and write them. Each is timed
`--repeats` times (the stored file deleted between uploads, untimed); the peak memory
Python allocates during one more upload is traced (tracemalloc). Two kinds of file: a PNG
(whose header alone is read to check it) and UTF-8 text (read whole once more, to check
it is text).

    DATABASE_URL=postgres://... .venv/bin/python -m bench.files [--size-mib 10] [--repeats 7]

Targets: an upload takes at most 2x the copy (median), and its peak memory stays flat:
a few MiB whatever the file's size. Hashing alone takes about twice the kernel's copy, so
the second ratio says how far the upload is from the least it must do.
"""

import argparse
import functools
import hashlib
import os
import secrets
import shutil
import statistics
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import TYPE_CHECKING

from bench.common import django_setup, progress

if TYPE_CHECKING:
    from accounts.models import User

MIB = 1024 * 1024
TARGET_RATIO = 2.0
TARGET_PEAK_MIB = 8.0


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mib", type=float, default=10.0)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--allow-sqlite", action="store_true", help="run on a non-PostgreSQL DB")
    args = parser.parse_args()
    if args.repeats < 1 or args.size_mib <= 0:
        parser.error("need --repeats >= 1 and a positive --size-mib")
    return args


def png_of(size: int, path: Path) -> None:
    """A PNG of about `size` bytes: random pixels, stored uncompressed."""
    from PIL import Image

    side = max(1, int((size / 3) ** 0.5))
    Image.frombytes("RGB", (side, side), os.urandom(side * side * 3)).save(
        path, "PNG", compress_level=0
    )


def text_of(size: int, path: Path) -> None:
    line = b"The quick brown fox jumps over the lazy dog, 0123456789.\n"
    with path.open("wb") as out:
        written = 0
        while written < size:
            out.write(line)
            written += len(line)


def upload_once(owner: "User", secret: str, source: Path) -> float:
    """Seconds to upload `source`; the stored file is deleted after, untimed (in autocommit
    its bytes go at once), so the next upload stores anew."""
    from conversations import services
    from conversations.models import StoredFile
    from tests.support.files import MultipartBody, streamed_post

    with source.open("rb") as handle:
        started = time.perf_counter()
        response = streamed_post(MultipartBody(handle, source.stat().st_size), secret)
        elapsed = time.perf_counter() - started
    if response.status_code != 201:
        raise RuntimeError(f"upload answered {response.status_code}: {response.content[:200]!r}")
    services.file_delete(file=StoredFile.objects.get(owner=owner))
    return elapsed


def copy_once(source: Path, target: Path) -> float:
    started = time.perf_counter()
    shutil.copyfile(source, target)
    elapsed = time.perf_counter() - started
    target.unlink()
    return elapsed


def copy_hash_once(source: Path, target: Path) -> float:
    """The least an upload must do: read the bytes, hash them, write them."""
    started = time.perf_counter()
    digest = hashlib.sha256()
    with source.open("rb") as reader, target.open("wb") as writer:
        while chunk := reader.read(MIB):
            digest.update(chunk)
            writer.write(chunk)
    digest.hexdigest()
    elapsed = time.perf_counter() - started
    target.unlink()
    return elapsed


def main() -> int:
    args = parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="bench-files-"))
    os.environ["PARLEY_MEDIA_ROOT"] = str(scratch / "media")
    django_setup()
    from django.core.management import call_command
    from django.db import connection

    from accounts import services as account_services
    from accounts.models import User
    from bench.common import database_label, database_refused
    from conversations import services

    try:
        if database_refused("files", args.allow_sqlite):
            return 2
        call_command("migrate", interactive=False, verbosity=0)
        size = int(args.size_mib * MIB)
        sources = {"png": scratch / "source.png", "text": scratch / "source.txt"}
        png_of(size, sources["png"])
        text_of(size, sources["text"])
        owner = User.objects.create_user(username=f"bench-{secrets.token_hex(6)}")
        _, secret = account_services.api_key_create(owner=owner, name="bench", scopes=["chat"])
        print(
            f"bench.files on {database_label()} ({connection.vendor}), {os.cpu_count()} CPUs, "
            f"repeats={args.repeats}\n"
        )
        print(
            "| file | size MiB | copy median ms | read + sha256 + write median ms "
            "| upload median ms | upload / copy | upload / read + sha256 + write "
            "| peak memory during upload MiB | verdict |"
        )
        print("|---|---:|---:|---:|---:|---:|---:|---:|---|")
        failed = False
        try:
            for kind, source in sources.items():
                length = source.stat().st_size
                upload = functools.partial(upload_once, owner, secret, source)
                copy = functools.partial(copy_once, source, scratch / "copy")
                copy_hash = functools.partial(copy_hash_once, source, scratch / "copy")
                upload()  # warm-up
                copies = [copy() for _ in range(args.repeats)]
                hashed = [copy_hash() for _ in range(args.repeats)]
                uploads = [upload() for _ in range(args.repeats)]
                tracemalloc.start()
                upload()
                peak = tracemalloc.get_traced_memory()[1] / MIB
                tracemalloc.stop()
                copy_ms = statistics.median(copies) * 1000
                hashed_ms = statistics.median(hashed) * 1000
                upload_ms = statistics.median(uploads) * 1000
                ratio = upload_ms / copy_ms
                ok = ratio <= TARGET_RATIO and peak <= TARGET_PEAK_MIB
                failed |= not ok
                progress(f"{kind}: copy {copy_ms:.1f} ms, upload {upload_ms:.1f} ms")
                print(
                    f"| {kind} | {length / MIB:.1f} | {copy_ms:.1f} | {hashed_ms:.1f} "
                    f"| {upload_ms:.1f} | {ratio:.2f}x | {upload_ms / hashed_ms:.2f}x "
                    f"| {peak:.2f} | {'PASS' if ok else 'FAIL'} |"
                )
            print(
                f"\ntargets: upload <= {TARGET_RATIO:.0f}x the copy, "
                f"peak memory <= {TARGET_PEAK_MIB:.0f} MiB; {'missed' if failed else 'met'}"
            )
        finally:
            services.user_delete(actor=None, user=owner)
            progress(f"cleaned up user {owner.username} and its files")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
