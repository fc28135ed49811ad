"""The files storage in an S3-compatible bucket: configured from the environment, keeping
no copy of an object in memory or on disk, whether it is uploaded or read, and reading
from any place in it."""

import json
import os
import subprocess
import sys
import tracemalloc
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured

from config.settings.files import s3_files_storage
from conversations import services
from tests.support.files import file_make
from tests.support.processes import ROOT

MIB = 1024 * 1024


def files_storage_setting(**environ: str) -> Any:
    """STORAGES["files"] as the settings make it in a process with `environ`."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("PARLEY_FILES_S3_")}
    script = "import json; from config.settings import files; print(json.dumps(files.STORAGES))"
    out = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT, env={**clean, **environ}, capture_output=True, text=True, check=True,
    )  # fmt: skip
    return json.loads(out.stdout)["files"]


def test_the_environment_chooses_the_bucket_and_the_file_system_is_the_default():
    assert files_storage_setting()["BACKEND"].endswith("FileSystemStorage")
    configured = files_storage_setting(
        PARLEY_FILES_S3_BUCKET="parley-files",
        PARLEY_FILES_S3_ENDPOINT_URL="https://s3.example.com",
        PARLEY_FILES_S3_REGION="eu-west-1",
        PARLEY_FILES_S3_PREFIX="/prod/",
        PARLEY_FILES_S3_ADDRESSING_STYLE="path",
    )
    assert configured["BACKEND"] == "config.file_storage.FilesS3Storage"
    options = configured["OPTIONS"]
    assert options["bucket_name"] == "parley-files"
    assert options["endpoint_url"] == "https://s3.example.com"
    assert options["region_name"] == "eu-west-1"
    assert options["location"] == "prod"
    assert options["addressing_style"] == "path"
    # Files are served by Parley after its checks: nothing makes an object public, and a
    # file's name (owner and sha256) is overwritten only with the same bytes.
    assert options["default_acl"] is None
    assert options["querystring_auth"] is True
    assert options["file_overwrite"] is True


def test_an_unknown_addressing_style_is_refused_naming_the_setting():
    with pytest.raises(ImproperlyConfigured, match="PARLEY_FILES_S3_ADDRESSING_STYLE"):
        s3_files_storage(bucket="b", addressing_style="sideways")


@pytest.mark.django_db
def test_an_upload_goes_from_the_staged_file_in_parts_never_whole(owner, s3_files):
    # Past the size at which an upload goes in parts.
    data = b"a" * (12 * MIB)
    services.files_storage().exists("warm-up")  # the client is made before measuring
    tracemalloc.start()
    try:
        stored = file_make(owner, data, "big.txt")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert s3_files.read(stored.storage_name) == data
    # Less than one part (8 MiB): each part is read from the file as it is sent.
    assert peak < 8 * MIB, f"{peak / MIB:.1f} MiB"


@pytest.mark.django_db
def test_a_read_starts_anywhere_and_goes_on_from_there(owner, s3_files):
    data = "".join(f"{i:07d}\n" for i in range(200_000)).encode()  # 1.6 MB
    stored = file_make(owner, data, "numbers.txt")
    with services.files_storage().open(stored.storage_name, "rb") as file:
        assert file.size == len(data)
        assert file.read(8) == b"0000000\n"
        file.seek(-8, os.SEEK_END)
        assert file.read() == b"0199999\n"
        file.seek(800_000)
        assert file.read(8) == b"0100000\n"
        assert file.tell() == 800_008
        file.seek(8, os.SEEK_CUR)
        assert file.read(8) == b"0100002\n"
        file.seek(0)
        assert file.read() == data


@pytest.mark.django_db
def test_a_missing_object_is_file_not_found(s3_files):
    with pytest.raises(FileNotFoundError):
        services.files_storage().open("files/1/missing", "rb")
