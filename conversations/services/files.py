"""Writes of uploaded files: store (deduplicated per owner, within the owner's quota),
delete, the sweep of files no message uses, and the bytes of a deleted account.

Bytes live in the "files" storage under `files/<owner id>/<sha256>`, one object per row.
Every write of an owner's bytes, and every deletion of them, happens under a lock on the
owner's row, so an upload of the same bytes racing a delete of them cannot lose them, and
two uploads racing for the last of the quota cannot both pass. Bytes are deleted after
the row's deletion commits, never before.
"""

import logging
from collections.abc import Iterable
from datetime import datetime, timedelta

from django.conf import settings
from django.core.files import File
from django.core.files.storage import Storage, storages
from django.db import transaction
from django.db.models import Exists, OuterRef, RestrictedError, Sum
from django.utils import timezone

from accounts.models import User
from conversations.errors import FILE_IN_USE, FILE_QUOTA_EXCEEDED, ParleyError
from conversations.models import Attachment, StoredFile
from conversations.services.file_staging import StagedFile
from conversations.services.file_types import file_kind_sniff, filename_clean

log = logging.getLogger(__name__)

SWEEP_PAGE = 200


class _Staged(File):
    """Staged bytes as storage takes them: a file system storage moves the temporary
    file into place (a rename on the same file system) instead of copying it."""

    def temporary_file_path(self) -> str:
        return str(getattr(self.file, "name", ""))


def files_storage() -> Storage:
    return storages["files"]


def file_storage_name(*, owner_id: int, sha256: str) -> str:
    return f"files/{owner_id}/{sha256}"


def _owner_lock(owner_id: int) -> None:
    list(User.objects.select_for_update().filter(pk=owner_id).values_list("pk", flat=True))


def _quota_check(*, owner_id: int, size: int) -> None:
    quota: int = settings.PARLEY_FILE_QUOTA_BYTES
    if not quota:
        return
    used = StoredFile.objects.filter(owner_id=owner_id).aggregate(total=Sum("size"))["total"] or 0
    if used + size > quota:
        raise ParleyError(
            FILE_QUOTA_EXCEEDED,
            f"This file ({size} bytes) would take your files past your storage limit of "
            f"{quota} bytes ({used} used); delete some files to upload more.",
            {"quota_bytes": quota, "used_bytes": used},
        )


def file_store(*, owner: User, staged: StagedFile, filename: str) -> tuple[StoredFile, bool]:
    """The owner's file holding the staged bytes, and whether it was created now. The same
    bytes uploaded again give the file stored the first time, under its first name.
    Refused (nothing stored): 415 unsupported_file_type, 400 image_too_large, 413
    file_quota_exceeded."""
    name = filename_clean(filename)
    kind = file_kind_sniff(file=staged.file, size=staged.size, filename=name)
    storage = files_storage()
    storage_name = file_storage_name(owner_id=owner.pk, sha256=staged.sha256)
    written = False
    try:
        with transaction.atomic():
            _owner_lock(owner.pk)
            existing = StoredFile.objects.filter(owner=owner, sha256=staged.sha256).first()
            if existing is not None:
                return existing, False
            _quota_check(owner_id=owner.pk, size=staged.size)
            # Left by an upload that failed after writing (no row names it): replaced.
            if storage.exists(storage_name):
                storage.delete(storage_name)
            staged.file.seek(0)
            saved = storage.save(storage_name, _Staged(staged.file))
            written = True
            stored = StoredFile.objects.create(
                owner=owner,
                sha256=staged.sha256,
                size=staged.size,
                content_type=kind.content_type,
                filename=name,
                storage_name=saved,
                width=kind.width,
                height=kind.height,
            )
    except BaseException:
        if written:
            storage.delete(storage_name)
        raise
    return stored, True


def _bytes_delete(*, owner_id: int, sha256: str, storage_name: str) -> None:
    """Delete a deleted file's bytes, unless the owner uploaded the same bytes again
    since (their row names them once more)."""
    try:
        with transaction.atomic():
            _owner_lock(owner_id)
            if StoredFile.objects.filter(owner_id=owner_id, sha256=sha256).exists():
                return
            files_storage().delete(storage_name)
    except Exception:
        log.exception("the bytes of a deleted file could not be deleted: %s", storage_name)


def _bytes_delete_after_commit(rows: Iterable[tuple[int, str, str]]) -> None:
    gone = list(rows)

    def delete() -> None:
        for owner_id, sha256, storage_name in gone:
            _bytes_delete(owner_id=owner_id, sha256=sha256, storage_name=storage_name)

    if gone:
        transaction.on_commit(delete)


def file_delete(*, file: StoredFile) -> None:
    """Delete the file, its bytes after the commit; 409 file_in_use while a message uses it."""
    with transaction.atomic():
        try:
            file.delete()
        except RestrictedError:
            raise ParleyError(FILE_IN_USE) from None
        _bytes_delete_after_commit([(file.owner_id, file.sha256, file.storage_name)])


def files_orphans_sweep(*, now: datetime | None = None) -> int:
    """Delete the files no message uses that are older than PARLEY_FILE_ORPHAN_SECONDS,
    bytes included; page by page, each page locked, so a file attached meanwhile stays."""
    cutoff = (now or timezone.now()) - timedelta(seconds=settings.PARLEY_FILE_ORPHAN_SECONDS)
    unused = StoredFile.objects.filter(created_at__lt=cutoff).exclude(
        Exists(Attachment.objects.filter(file=OuterRef("pk")))
    )
    deleted = 0
    while True:
        with transaction.atomic():
            page = list(
                unused.select_for_update()
                .order_by("pk")
                .values_list("pk", "owner_id", "sha256", "storage_name")[:SWEEP_PAGE]
            )
            if not page:
                return deleted
            StoredFile.objects.filter(pk__in=[pk for pk, *_ in page]).delete()
            _bytes_delete_after_commit((owner, sha, name) for _, owner, sha, name in page)
        deleted += len(page)


def files_owner_forget(*, owner_id: int) -> None:
    """Called inside the transaction deleting an account: its files' bytes go after the
    commit (the rows go with the account)."""
    rows = StoredFile.objects.filter(owner_id=owner_id).values_list(
        "owner_id", "sha256", "storage_name"
    )
    _bytes_delete_after_commit(rows.iterator())
