"""The files an imported document's messages carry (`attachments`, each named by its
bytes' sha256), resolved to the importing user's own files before anything of the
conversation is stored:

- from a ZIP (formats/bundles.py): every file named must be in it as `files/<sha256>`;
  its bytes are stored as an upload's are (`file_store`: the type decided from the bytes,
  the size limit, the quota, one file per owner and content);
- from a plain JSON document: the user must already have a file with those bytes.

A file this import stored is deleted again, bytes included, when the import fails.
"""

import logging
from dataclasses import dataclass, field

from django.conf import settings

from accounts.models import User
from conversations.errors import ParleyError, Problem, ValidationFailed
from conversations.formats.bundles import FILES, Bundle
from conversations.formats.importing import ImportedAttachment, ParsedExport
from conversations.models import StoredFile
from conversations.services.files import file_store

log = logging.getLogger(__name__)

# Hashes looked up per query among a user's files.
LOOKUP_BATCH = 1000


@dataclass
class ImportFiles:
    """The files the document names, by sha256 (`wanted`: the JSON path of each
    attachment naming it, and the first such attachment), and what they resolved to."""

    wanted: dict[str, list[tuple[str, ImportedAttachment]]] = field(default_factory=dict)
    found: dict[str, StoredFile] = field(default_factory=dict)
    # Stored by this import: deleted if it fails.
    created: list[StoredFile] = field(default_factory=list)


def import_files_named(parsed: ParsedExport) -> ImportFiles:
    """The files the messages carry, each message's list checked as a send's is (at most
    PARLEY_FILE_MAX_PER_MESSAGE, no file twice): ValidationFailed naming each problem."""
    files = ImportFiles()
    limit: int = settings.PARLEY_FILE_MAX_PER_MESSAGE
    problems: list[Problem] = []
    for index, message in enumerate(parsed.messages):
        attachments = getattr(message, "attachments", None) or []
        base = f"$.messages[{index}].attachments"
        if len(attachments) > limit:
            problems.append(Problem(base, f"at most {limit} files per message"))
        seen: set[str] = set()
        for position, attachment in enumerate(attachments):
            path = f"{base}[{position}]"
            if attachment.sha256 in seen:
                problems.append(Problem(f"{path}.sha256", "is already attached to this message"))
            seen.add(attachment.sha256)
            files.wanted.setdefault(attachment.sha256, []).append((path, attachment))
    if problems:
        raise ValidationFailed(problems)
    return files


def import_files_owned(*, owner: User, files: ImportFiles) -> None:
    """Resolve every file not found yet to the owner's file with the same bytes:
    ValidationFailed naming each sha256 the owner has no file for."""
    missing = [sha256 for sha256 in files.wanted if sha256 not in files.found]
    for start in range(0, len(missing), LOOKUP_BATCH):
        rows = StoredFile.objects.filter(
            owner=owner, sha256__in=missing[start : start + LOOKUP_BATCH]
        )
        files.found.update((row.sha256, row) for row in rows)
    problems = [
        Problem(
            f"{files.wanted[sha256][0][0]}.sha256",
            f"names a file ({sha256}) that is not among your files; import the ZIP export, "
            "which carries the files' bytes, or upload the file first",
        )
        for sha256 in missing
        if sha256 not in files.found
    ]
    if problems:
        raise ValidationFailed(problems)


def _entry_refusal(exc: ParleyError, entry: str) -> ParleyError:
    """A file's refusal (type, pixels, quota, an empty file) saying which entry it was."""
    if isinstance(exc, ValidationFailed):
        problems = [Problem(entry, problem.message) for problem in exc.problems]
        return ValidationFailed(problems or [Problem(entry, exc.message)])
    return ParleyError(exc.error, f"{entry}: {exc.message}", exc.details)


def import_files_unpack(*, owner: User, bundle: Bundle, files: ImportFiles) -> None:
    """Store the bytes of every file the document names from the ZIP, as the owner's
    files, in the document's order: 400 when one is not in the ZIP, or when its bytes do
    not hash to its name or are not the size the document says; an upload's refusals
    otherwise (type, pixels, size, quota), naming the entry. The files stored are in
    `files.created` even when one fails, for files_discard."""
    absent = [
        Problem(f"{paths[0][0]}.sha256", f"names {FILES}{sha256}, which is not in the ZIP")
        for sha256, paths in files.wanted.items()
        if sha256 not in bundle.files
    ]
    if absent:
        raise ValidationFailed(absent)
    for sha256, paths in files.wanted.items():
        entry = FILES + sha256
        staged = bundle.file_stage(sha256)
        try:
            wrong = [
                Problem(f"{path}.size", f"is {named.size}, but {entry} holds {staged.size} bytes")
                for path, named in paths
                if named.size != staged.size
            ]
            if wrong:
                raise ValidationFailed(wrong)
            try:
                stored, created = file_store(
                    owner=owner, staged=staged, filename=paths[0][1].filename
                )
            except ParleyError as exc:
                raise _entry_refusal(exc, entry) from None
        finally:
            staged.close()
        if created:
            files.created.append(stored)
        files.found[sha256] = stored
