"""Storage and uploaded files: where bytes are kept, and the limits of an upload."""

from pathlib import Path
from typing import Any

from django.core.exceptions import ImproperlyConfigured

from config.settings.env import env_int, env_list, env_str

BASE_DIR = Path(__file__).resolve().parent.parent.parent


def s3_files_storage(
    *,
    bucket: str,
    endpoint_url: str = "",
    region: str = "",
    prefix: str = "",
    addressing_style: str = "",
) -> dict[str, Any]:
    """The "files" storage in an S3-compatible bucket. Credentials are found the way boto3
    finds them (AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, a profile, an instance role)."""
    if addressing_style not in {"", "auto", "path", "virtual"}:
        raise ImproperlyConfigured(
            f"PARLEY_FILES_S3_ADDRESSING_STYLE must be path, virtual or auto, "
            f"got {addressing_style!r}"
        )
    return {
        "BACKEND": "config.file_storage.FilesS3Storage",
        "OPTIONS": {
            "bucket_name": bucket,
            "endpoint_url": endpoint_url or None,
            "region_name": region or None,
            "addressing_style": addressing_style or None,
            "location": prefix.strip("/"),
            # A file's name is its owner and sha256: the same name always holds the same
            # bytes, and services.files saves under exactly that name.
            "file_overwrite": True,
            # No ACL is sent: objects stay as private as the bucket (a bucket with ACLs
            # disabled, the AWS default, refuses an upload naming one). Parley serves the
            # bytes itself, after checking who asks; no URL of the bucket is handed out.
            "default_acl": None,
            "querystring_auth": True,
        },
    }


# Uploaded files go to "files": the file system under PARLEY_MEDIA_ROOT by default, an
# S3-compatible bucket when PARLEY_FILES_S3_BUCKET is set (README: "File storage").
PARLEY_MEDIA_ROOT = env_str("PARLEY_MEDIA_ROOT") or str(BASE_DIR / "var" / "media")
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"},
    "files": (
        s3_files_storage(
            bucket=env_str("PARLEY_FILES_S3_BUCKET"),
            endpoint_url=env_str("PARLEY_FILES_S3_ENDPOINT_URL"),
            region=env_str("PARLEY_FILES_S3_REGION"),
            prefix=env_str("PARLEY_FILES_S3_PREFIX"),
            addressing_style=env_str("PARLEY_FILES_S3_ADDRESSING_STYLE"),
        )
        if env_str("PARLEY_FILES_S3_BUCKET")
        else {
            "BACKEND": "django.core.files.storage.FileSystemStorage",
            "OPTIONS": {"location": PARLEY_MEDIA_ROOT, "base_url": None},
        }
    ),
}

# Largest file accepted; an upload is refused (413) as soon as it passes this, while it
# streams, and nothing of it is kept.
PARLEY_FILE_MAX_BYTES = env_int("PARLEY_FILE_MAX_BYTES", 20 * 1024 * 1024)
# Largest image, in pixels (width x height read from its header): a decompression bomb is
# refused before it is decoded.
PARLEY_FILE_MAX_IMAGE_PIXELS = env_int("PARLEY_FILE_MAX_IMAGE_PIXELS", 50_000_000)
# Bytes of files one user may keep; 0 = unlimited.
PARLEY_FILE_QUOTA_BYTES = env_int("PARLEY_FILE_QUOTA_BYTES", 1_000_000_000)
PARLEY_FILE_MAX_PER_MESSAGE = env_int("PARLEY_FILE_MAX_PER_MESSAGE", 10)
# Files no message uses are deleted, bytes too, once this old.
PARLEY_FILE_ORPHAN_SECONDS = env_int("PARLEY_FILE_ORPHAN_SECONDS", 24 * 3600)
# Beat sweeps them this often (added to CELERY_BEAT_SCHEDULE), and every minute the files
# whose last message was deleted.
FILES_BEAT_SCHEDULE = {
    "files-orphans": {
        "task": "conversations.tasks.files_orphans_sweep",
        "schedule": float(env_int("PARLEY_FILE_SWEEP_SECONDS", 3600)),
    },
    "files-released": {
        "task": "conversations.tasks.files_released_sweep",
        "schedule": 60.0,
    },
}
# The types a file may have, as decided from its bytes; others are refused (415).
PARLEY_FILE_TYPES = env_list(
    "PARLEY_FILE_TYPES",
    [
        "image/png",
        "image/jpeg",
        "image/gif",
        "image/webp",
        "application/pdf",
        "text/plain",
        "text/markdown",
        "text/csv",
        "application/json",
    ],
)
# Every uploaded file streams to a temporary file, never into memory.
# (Not 0: the ASGI handler spools a request body in memory up to this size, and 0 would
# mean without limit.)
FILE_UPLOAD_MAX_MEMORY_SIZE = 256 * 1024
FILE_UPLOAD_HANDLERS = ["django.core.files.uploadhandler.TemporaryFileUploadHandler"]

# A PDF's text is extracted once at upload, up to this many characters: more than the
# model could be sent in one call (PARLEY_CONTEXT_TOKENS at about 4 characters a token).
PARLEY_FILE_TEXT_MAX_CHARS = env_int("PARLEY_FILE_TEXT_MAX_CHARS", 1_000_000)

# A conversation imported as a ZIP (conversation.json and files/<sha256>): the largest
# archive accepted (refused as it streams in, like an upload), what all its entries may
# unpack to, and how many entries it may hold. Both are read from the archive's directory
# before anything is unpacked, and the unpacking itself stops at the sizes declared there.
PARLEY_IMPORT_ZIP_MAX_BYTES = env_int("PARLEY_IMPORT_ZIP_MAX_BYTES", 512 * 1024 * 1024)
PARLEY_IMPORT_ZIP_MAX_UNPACKED_BYTES = env_int(
    "PARLEY_IMPORT_ZIP_MAX_UNPACKED_BYTES", 1024 * 1024 * 1024
)
PARLEY_IMPORT_ZIP_MAX_ENTRIES = env_int("PARLEY_IMPORT_ZIP_MAX_ENTRIES", 10_000)
