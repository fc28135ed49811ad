"""Storage and uploaded files: where bytes are kept, and the limits of an upload."""

from pathlib import Path

from config.settings.env import env_int, env_list, env_str

BASE_DIR = Path(__file__).resolve().parent.parent.parent

# Uploaded files go to "files": the file system under PARLEY_MEDIA_ROOT by default. Any
# S3-compatible store works through django-storages (README: "File storage").
PARLEY_MEDIA_ROOT = env_str("PARLEY_MEDIA_ROOT") or str(BASE_DIR / "var" / "media")
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"},
    "files": {
        "BACKEND": "django.core.files.storage.FileSystemStorage",
        "OPTIONS": {"location": PARLEY_MEDIA_ROOT, "base_url": None},
    },
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
# Beat sweeps them this often (added to CELERY_BEAT_SCHEDULE).
FILES_BEAT_SCHEDULE = {
    "files-orphans": {
        "task": "conversations.tasks.files_orphans_sweep",
        "schedule": float(env_int("PARLEY_FILE_SWEEP_SECONDS", 3600)),
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
