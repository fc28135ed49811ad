"""The files of a model call's messages, read for the model: only those of the messages
the call keeps (context.build_model_input asks once it has chosen), each file once
however many messages carry it, and only what the model can be sent of it.

Images are read whole into base64 data URLs when the conversation's model takes images,
and not read at all when it does not (they are described in words). Text files are read
up to the most of their text a message may show (context.file_text_chars); a PDF's text
comes from the database, where its upload put it.

A message kept nowhere (a `store: false` response) reads its files by the same rules:
the owner's stored files it names (`stored_files_input`), and bytes it carries that were
never stored (`staged_file_input`: sniffed as an upload is, a PDF's text extracted then).
"""

import base64
import codecs
import logging
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import IO, Any

from django.db.models.functions import Substr

from conversations.context import FileInput, FilesRead
from conversations.models import Attachment, FileText, StoredFile
from conversations.services.file_staging import StagedFile
from conversations.services.file_text import pdf_text_extract
from conversations.services.file_types import PDF, file_kind_sniff, filename_clean
from conversations.services.files import files_storage
from conversations.sql import HistoryRow

log = logging.getLogger(__name__)

_FIELDS = (
    "message_id",
    "file_id",
    "file__filename",
    "file__content_type",
    "file__size",
    "file__width",
    "file__height",
    "file__page_count",
    "file__storage_name",
)


def history_files(
    *, rows: Sequence[HistoryRow], vision: bool, text_chars: int
) -> tuple[list[HistoryRow], FilesRead]:
    """`rows` with the files of the messages that have some (HistoryRow.with_files), not
    read yet, in one query; and the reader that reads them when asked."""
    storage_names: dict[str, str] = {}

    def read(files: Sequence[FileInput]) -> Mapping[str, FileInput]:
        return _files_read(files, storage_names=storage_names, text_chars=text_chars)

    keys = [row.with_files for row in rows if row.with_files is not None]
    if not keys:
        return list(rows), read
    found = (
        Attachment.objects.filter(message_id__in=keys)
        .order_by("message_id", "position")
        .values_list(*_FIELDS)
    )
    carried: dict[Any, list[FileInput]] = {}
    for row in found:
        values = dict(zip(_FIELDS, row, strict=True))
        key = str(values["file_id"])
        storage_names[key] = values["file__storage_name"]
        file = _unread(
            key=key,
            filename=values["file__filename"],
            content_type=values["file__content_type"],
            width=values["file__width"],
            height=values["file__height"],
            pages=values["file__page_count"],
            size=values["file__size"],
            vision=vision,
        )
        carried.setdefault(values["message_id"], []).append(file)
    described = [
        row._replace(files=tuple(carried.get(row.with_files, ())))
        if row.with_files is not None
        else row
        for row in rows
    ]
    return described, read


def file_is_image(content_type: str) -> bool:
    return content_type.startswith("image/")


def _unread(*, key: str, content_type: str, vision: bool, **described: Any) -> FileInput:
    """A stored file described, not read yet (an image for a model that reads text only
    is described, never read)."""
    return FileInput(
        key=key,
        content_type=content_type,
        read=file_is_image(content_type) and not vision,
        **described,
    )


def stored_files_input(
    *, files: Sequence[StoredFile], vision: bool, text_chars: int
) -> list[FileInput]:
    """The owner's stored files, in order, read for a message kept nowhere."""
    described = [
        _unread(
            key=str(file.pk),
            filename=file.filename,
            content_type=file.content_type,
            width=file.width,
            height=file.height,
            pages=file.page_count,
            size=file.size,
            vision=vision,
        )
        for file in files
    ]
    names = {str(file.pk): file.storage_name for file in files}
    found = _files_read(
        [file for file in described if not file.read], storage_names=names, text_chars=text_chars
    )
    return [found.get(file.key, file) for file in described]


def staged_file_input(
    *, staged: StagedFile, filename: str, vision: bool, text_chars: int
) -> FileInput:
    """Bytes never stored, read for a message kept nowhere by the rules a stored file
    is read by. Refused as an upload is (file_kind_sniff: a type not accepted, an image of
    too many pixels, an empty file)."""
    name = filename_clean(filename)
    kind = file_kind_sniff(file=staged.file, size=staged.size, filename=name)
    file = FileInput(
        filename=name,
        content_type=kind.content_type,
        width=kind.width,
        height=kind.height,
        size=staged.size,
    )
    if file.is_image:
        if not vision:
            return file
        staged.file.seek(0)
        return replace(file, image_url=_data_url_of(staged.file.read(), file.content_type))
    if file.content_type == PDF:
        pdf = pdf_text_extract(staged.file)
        head = pdf.text[: text_chars + 1] if pdf.text else ""
        return _pdf_input(
            replace(file, pages=pdf.pages), (head, pdf.complete), text_chars=text_chars
        )
    staged.file.seek(0)
    text, complete = _text_of(staged.file, size=staged.size, chars=text_chars)
    return replace(file, text=text, complete=complete)


def _files_read(
    files: Sequence[FileInput], *, storage_names: Mapping[str, str], text_chars: int
) -> dict[str, FileInput]:
    distinct = {file.key: file for file in files}
    pdfs = [key for key, file in distinct.items() if file.content_type == PDF]
    texts = _pdf_texts(pdfs, text_chars=text_chars) if pdfs else {}
    out: dict[str, FileInput] = {}
    for key, file in distinct.items():
        name = storage_names.get(key, "")
        try:
            if file.is_image:
                out[key] = replace(file, read=True, image_url=_data_url(name, file.content_type))
            elif file.content_type == PDF:
                out[key] = _pdf_input(file, texts.get(key), text_chars=text_chars)
            else:
                text, complete = _text_head(name, size=file.size, chars=text_chars)
                out[key] = replace(file, read=True, text=text, complete=complete)
        except OSError:
            # Bytes gone from storage (removed by hand, a store down): the turn goes on
            # without them, and the model is told.
            log.warning("a file's bytes could not be read for the model: %s", name, exc_info=True)
            out[key] = replace(file, read=True, text=None)
    return out


def _pdf_texts(keys: Sequence[str], *, text_chars: int) -> dict[str, tuple[str, bool]]:
    """Each PDF's text, cut one character past what can be shown (which tells whether it
    goes on), in one query."""
    rows = (
        FileText.objects.filter(file_id__in=keys)
        .annotate(head=Substr("text", 1, text_chars + 1))
        .values_list("file_id", "head", "complete")
    )
    return {str(key): (head, complete) for key, head, complete in rows}


def _pdf_input(file: FileInput, found: tuple[str, bool] | None, *, text_chars: int) -> FileInput:
    if file.pages is None:
        return replace(file, read=True, text=None)  # unreadable at upload
    text, complete = found or ("", True)
    return replace(
        file, read=True, text=text[:text_chars], complete=complete and len(text) <= text_chars
    )


def _data_url(name: str, content_type: str) -> str:
    with files_storage().open(name, "rb") as stream:
        return _data_url_of(stream.read(), content_type)


def _data_url_of(data: bytes, content_type: str) -> str:
    return f"data:{content_type};base64,{base64.b64encode(data).decode('ascii')}"


def _text_head(name: str, *, size: int, chars: int) -> tuple[str, bool]:
    with files_storage().open(name, "rb") as stream:
        return _text_of(stream, size=size, chars=chars)


def _text_of(stream: IO[bytes], *, size: int, chars: int) -> tuple[str, bool]:
    """The first `chars` characters of a UTF-8 file (checked at upload), and whether that
    is all of it. At most 4 bytes a character are read."""
    wanted = min(size, chars * 4)
    data = stream.read(wanted)
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    text = decoder.decode(data, final=len(data) >= size)
    return text[:chars], len(data) >= size and len(text) <= chars
