"""Uploaded files and the messages they are attached to.

A `StoredFile` is one owner's bytes, stored once per owner and content (the unique
(owner, sha256)), under the storage name `files/<owner id>/<sha256>`: one row per stored
object, so deleting a row's bytes never takes another owner's. An `Attachment` puts a
file in a message, in order; a file some attachment uses cannot be deleted.
"""

import uuid

from django.conf import settings
from django.db import models
from django.utils import timezone

from conversations.models.conversations import Conversation, Message

FILENAME_MAX = 255


class StoredFile(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="files"
    )
    sha256 = models.CharField(max_length=64)
    size = models.PositiveBigIntegerField()
    # Decided from the bytes at upload (conversations.services.file_types), never from the
    # name or the client's header; served as such.
    content_type = models.CharField(max_length=100)
    # The name of the first upload of these bytes, made safe to show and to send back.
    filename = models.CharField(max_length=FILENAME_MAX)
    storage_name = models.CharField(max_length=200)
    # Raster images only.
    width = models.PositiveIntegerField(null=True, blank=True)
    height = models.PositiveIntegerField(null=True, blank=True)
    # PDFs only: the page count, and the text extracted at upload (FileText).
    page_count = models.PositiveIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    # When a message first used the file: one never used waits PARLEY_FILE_ORPHAN_SECONDS
    # for its message before the sweep deletes it.
    attached_at = models.DateTimeField(null=True, blank=True)
    # Set when messages using the file are deleted (services.files_release): the next
    # sweep deletes the file if no message uses it any more, or clears this if one does.
    released_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name = "file"  # "No such file." when it is not the caller's
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["owner", "sha256"], name="stored_file_unique_bytes"),
        ]
        indexes = [
            models.Index(fields=["owner", "-created_at", "-id"], name="stored_file_owner_recent"),
            models.Index(fields=["created_at"], name="stored_file_created"),
            models.Index(
                fields=["released_at"],
                name="stored_file_released",
                condition=models.Q(released_at__isnull=False),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.filename} ({self.content_type}, {self.size} bytes)"


class FileText(models.Model):
    """The text of a PDF, extracted once at upload: the model reads it on every turn, and
    extracting it again each time would cost more than the call. Bounded by
    PARLEY_FILE_TEXT_MAX_CHARS (`complete` says whether it is all of it)."""

    file = models.OneToOneField(
        StoredFile, on_delete=models.CASCADE, primary_key=True, related_name="text"
    )
    text = models.TextField(blank=True)
    complete = models.BooleanField(default=True)

    def __str__(self) -> str:
        return f"text of {self.file_id} ({len(self.text)} chars)"


class Attachment(models.Model):
    """A file in a message, at `position`. It goes with its conversation (one DELETE per
    table, as messages do: nothing cascades from Message, so deleting messages never loads
    them), and a file stays while an attachment uses it (RESTRICT: deleting the file alone
    is refused, deleting it together with the attachment, as an account delete does, is
    not)."""

    conversation = models.ForeignKey(
        Conversation, on_delete=models.CASCADE, related_name="attachments"
    )
    message = models.ForeignKey(Message, on_delete=models.DO_NOTHING, related_name="attachments")
    file = models.ForeignKey(StoredFile, on_delete=models.RESTRICT, related_name="attachments")
    position = models.PositiveSmallIntegerField()

    class Meta:
        ordering = ["message", "position"]
        constraints = [
            models.UniqueConstraint(
                fields=["message", "position"], name="attachment_unique_position"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.message_id} #{self.position}: {self.file_id}"
