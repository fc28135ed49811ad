"""A local S3-compatible server (moto's) as a real process, and the "files" storage pointed
at a bucket of its own in it: the code under test talks HTTP to it as to any S3 store.

`s3_server_start()` starts one (tests/conftest.py starts one per test session);
`s3_files_use()` points the files storage at a new bucket there for one test.
"""

import os
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import boto3

from config.settings.files import s3_files_storage
from tests.support.processes import ROOT, ChildProcess, process_wait_ready
from tests.support.web_server import free_port

REGION = "us-east-1"
# Any key will do: the local server checks signatures' shape, not the secrets.
CREDENTIALS = {"aws_access_key_id": "parley-test", "aws_secret_access_key": "parley-test"}


@dataclass
class S3Server(ChildProcess):
    port: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @cached_property
    def client(self) -> Any:
        """One client for every test of the session (boto3 clients are thread-safe)."""
        return boto3.client("s3", endpoint_url=self.url, region_name=REGION, **CREDENTIALS)

    def answers(self) -> bool:
        try:
            with urllib.request.urlopen(self.url, timeout=1):
                return True
        except (urllib.error.URLError, OSError):
            return False


def s3_server_start() -> S3Server:
    """Start the server on a free port and wait until it answers."""
    port = free_port()
    handle, log_name = tempfile.mkstemp(prefix="parley-s3-", suffix=".log")
    with os.fdopen(handle, "wb") as log_file:
        process = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
            cwd=ROOT, stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    server = S3Server(process=process, log_path=Path(log_name), port=port)
    process_wait_ready(server, "the S3 server", server.answers)
    return server


@dataclass(frozen=True)
class S3Bucket:
    """A bucket of the local server that the files storage uses."""

    server: S3Server
    name: str
    prefix: str

    def keys(self) -> list[str]:
        """Every object's key, sorted (the storage's prefix included)."""
        listed = self.server.client.list_objects_v2(Bucket=self.name)
        return sorted(item["Key"] for item in listed.get("Contents", []))

    def read(self, key: str) -> bytes:
        body = self.server.client.get_object(Bucket=self.name, Key=key)["Body"]
        return bytes(body.read())


def s3_files_use(
    *, server: S3Server, settings: Any, monkeypatch: Any, prefix: str = ""
) -> S3Bucket:
    """Create a new bucket and point the "files" storage at it, configured as the
    environment would configure it (config/settings/files.py). The settings fixture's
    change resets Django's cache of storages, now and when the test ends."""
    name = f"parley-{uuid.uuid4().hex[:16]}"
    server.client.create_bucket(Bucket=name)
    for variable, value in CREDENTIALS.items():
        monkeypatch.setenv(variable.upper(), value)
    settings.STORAGES = {
        **settings.STORAGES,
        "files": s3_files_storage(
            bucket=name, endpoint_url=server.url, region=REGION, prefix=prefix
        ),
    }
    return S3Bucket(server=server, name=name, prefix=prefix)
