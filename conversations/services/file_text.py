"""The text of a PDF, extracted once when it is stored: what the model reads of it.

pypdf reads the file page by page and stops once PARLEY_FILE_TEXT_MAX_CHARS are
extracted, so a long document costs no more than the text the model could ever be sent. A
PDF pypdf cannot read (damaged, encrypted with a password) is still stored: its page count
and text stay unknown, and the model is told the text could not be read.
"""

import logging
from dataclasses import dataclass
from typing import IO

from django.conf import settings
from pypdf import PdfReader

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PdfText:
    pages: int | None  # None: the file could not be read
    text: str = ""
    complete: bool = True


def pdf_text_extract(file: IO[bytes]) -> PdfText:
    limit: int = settings.PARLEY_FILE_TEXT_MAX_CHARS
    file.seek(0)
    try:
        reader = PdfReader(file)
        if reader.is_encrypted and not reader.decrypt(""):
            return PdfText(pages=None)
        pages = len(reader.pages)
        texts: list[str] = []
        length = 0
        for page in reader.pages:
            text = page.extract_text() or ""
            texts.append(text)
            length += len(text) + 1
            if length > limit:
                return PdfText(pages, "\n".join(texts)[:limit], complete=False)
        return PdfText(pages, "\n".join(texts).strip())
    except Exception as exc:
        # A hostile or damaged file raises all sorts from deep inside the parser
        # (PyPdfError, ValueError, zlib and struct errors, RecursionError...).
        log.info("a PDF's text could not be read: %s", exc)
        return PdfText(pages=None)
    finally:
        file.seek(0)
