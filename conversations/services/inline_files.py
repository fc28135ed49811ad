"""Files a request carries inline (bytes in its body rather than uploaded first), stored
for the message it sends, and taken away again when that message is refused: a refused
request leaves no file behind.

Each file is stored as an upload is (services/files.py: sniffed, deduplicated, within the
quota), in a transaction of its own, before the message's transaction; if what follows
fails, the files this request made are deleted again (their bytes after that commit).
A file that was the owner's already (the same bytes uploaded before) stays, and so does
one some other message took meanwhile.
"""

import contextlib
import io
from collections.abc import Iterator

from accounts.models import User
from conversations.models import StoredFile
from conversations.services.file_staging import file_stage
from conversations.services.files import file_store, files_discard


class InlineFiles:
    """The files one request stores; `files_inline` undoes them if the request fails."""

    def __init__(self, owner: User) -> None:
        self.owner = owner
        self.made: list[StoredFile] = []

    def store(self, *, data: bytes, filename: str) -> StoredFile:
        """The owner's file holding `data` (refused as an upload is: too large, of a type
        not accepted, an image of too many pixels, past the quota)."""
        staged = file_stage(source=io.BytesIO(data))
        try:
            stored, created = file_store(owner=self.owner, staged=staged, filename=filename)
        finally:
            staged.close()
        if created:
            self.made.append(stored)
        return stored

    def undo(self) -> None:
        files_discard(self.made)
        self.made.clear()


@contextlib.contextmanager
def files_inline(*, owner: User) -> Iterator[InlineFiles]:
    """Files stored inside the block stay if it ends well; those it made are deleted if it
    raises."""
    files = InlineFiles(owner)
    try:
        yield files
    except BaseException:
        files.undo()
        raise
