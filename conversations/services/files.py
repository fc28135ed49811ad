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
from uuid import UUID

from django.conf import settings
from django.core.files import File
from django.core.files.storage import Storage, storages
from django.db import DatabaseError, transaction
from django.db.models import Exists, OuterRef, Q, QuerySet, RestrictedError, Sum
from django.utils import timezone

from accounts.models import User
from conversations.errors import FILE_IN_USE, FILE_QUOTA_EXCEEDED, ParleyError
from conversations.models import Attachment, FileText, StoredFile
from conversations.services.common import owner_lock
from conversations.services.file_staging import StagedFile
from conversations.services.file_text import pdf_text_extract
from conversations.services.file_types import PDF, file_kind_sniff, filename_clean

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
    # Before the owner's lock: reading a long PDF takes a while.
    pdf = pdf_text_extract(staged.file) if kind.content_type == PDF else None
    storage = files_storage()
    storage_name = file_storage_name(owner_id=owner.pk, sha256=staged.sha256)
    written = False
    try:
        with transaction.atomic():
            owner_lock(owner.pk)
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
                page_count=pdf.pages if pdf else None,
            )
            if pdf is not None and pdf.text:
                FileText.objects.create(file=stored, text=pdf.text, complete=pdf.complete)
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
            owner_lock(owner_id)
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


def _unused(files: QuerySet[StoredFile]) -> QuerySet[StoredFile]:
    return files.exclude(Exists(Attachment.objects.filter(file=OuterRef("pk"))))


def _sweep(candidates: QuerySet[StoredFile]) -> int:
    """Delete the candidates no message uses, bytes included, page by page. Each page is
    locked first and checked again after, by a statement of its own: one attached
    meanwhile (its message's transaction locked it too) is seen used and stays."""
    deleted = 0
    while True:
        with transaction.atomic():
            locked = list(
                candidates.select_for_update()
                .order_by("pk")
                .values_list("pk", flat=True)[:SWEEP_PAGE]
            )
            if not locked:
                return deleted
            page = list(
                _unused(StoredFile.objects.filter(pk__in=locked)).values_list(
                    "pk", "owner_id", "sha256", "storage_name"
                )
            )
            StoredFile.objects.filter(pk__in=[pk for pk, *_ in page]).delete()
            # Still used by another message: no longer a candidate.
            StoredFile.objects.filter(pk__in=locked, released_at__isnull=False).update(
                released_at=None
            )
            _bytes_delete_after_commit((owner, sha, name) for _, owner, sha, name in page)
        deleted += len(page)
        if len(locked) < SWEEP_PAGE:
            return deleted


def files_orphans_sweep(*, now: datetime | None = None) -> int:
    """Delete the files no message uses that were neither uploaded nor attached in the
    last PARLEY_FILE_ORPHAN_SECONDS, bytes included: uploads never sent, and (a safety
    net) any file left unused without being released."""
    cutoff = (now or timezone.now()) - timedelta(seconds=settings.PARLEY_FILE_ORPHAN_SECONDS)
    idle = StoredFile.objects.filter(created_at__lt=cutoff).filter(
        Q(attached_at=None) | Q(attached_at__lt=cutoff)
    )
    return _sweep(_unused(idle))


def files_release(*, conversation_ids: Iterable[UUID]) -> None:
    """Called in the transaction deleting conversations, before the delete: their files
    become candidates for files_released_sweep, which deletes those no other message
    uses within a minute. One UPDATE, whatever the number of attachments."""
    StoredFile.objects.filter(
        Exists(
            Attachment.objects.filter(file=OuterRef("pk"), conversation_id__in=conversation_ids)
        ),
        released_at=None,
    ).update(released_at=timezone.now())


def files_released_sweep() -> int:
    """Delete the released files no message uses any more, bytes included."""
    return _sweep(StoredFile.objects.filter(released_at__isnull=False))


def files_owner_forget(*, owner_id: int) -> None:
    """Called inside the transaction deleting an account: its files' bytes go after the
    commit (the rows go with the account)."""
    rows = StoredFile.objects.filter(owner_id=owner_id).values_list(
        "owner_id", "sha256", "storage_name"
    )
    _bytes_delete_after_commit(rows.iterator())


def files_discard(files: Iterable[StoredFile]) -> None:
    """Delete files stored for a request that then failed, bytes included (after the
    commit), unless something uses them meanwhile; best effort: one left behind is swept
    as unused."""
    for file in files:
        try:
            file_delete(file=file)
        except (ParleyError, DatabaseError):
            log.warning("a file stored for a failed request stays until the sweep: %s", file.pk)
