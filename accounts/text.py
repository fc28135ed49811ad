"""The one rule for text any database can store, and the one repair of text that breaks
it, shared by every app: it lives in `accounts`, the app the others build on, so
`accounts` itself never imports them."""

import json
from typing import Any


def unstorable_reason(text: str) -> str | None:
    """Why no database can hold `text`, or None: the one rule for every text stored."""
    # PostgreSQL text cannot hold NUL, so refuse it everywhere rather than fail on one backend.
    if "\x00" in text:
        return "contains a NUL character, which cannot be stored"
    if unencodable(text):
        # A lone surrogate: not text any database (or UTF-8 document) can hold.
        return "contains an unpaired surrogate, which is not valid text"
    return None


def unencodable(text: str) -> bool:
    """Whether `text` holds a lone surrogate, which UTF-8 cannot encode."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def storable_text(text: str) -> str:
    """Text that cannot be refused (from a model, a tool, an old row) made storable: a
    valid surrogate pair becomes its character, a lone surrogate and a NUL become U+FFFD."""
    if "\x00" in text:
        text = text.replace("\x00", "\ufffd")
    if unencodable(text):
        text = text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return text


def storable_json(value: Any) -> Any:
    """storable_text for every string of a JSON value, keys included."""
    if isinstance(value, str):
        return storable_text(value)
    if isinstance(value, dict):
        return {storable_text(str(k)): storable_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [storable_json(item) for item in value]
    return value


class StorableJSONDecoder(json.JSONDecoder):
    """Reads JSON columns with their text repaired. Input is checked before it is stored,
    but SQLite keeps a lone surrogate or a NUL inside JSON (as an escape) in a row written
    before those checks, and every page, export or answer including it would fail to
    encode. Only a document with an escape can hold one, so the others are not walked."""

    def decode(self, s: str, *args: Any, **kwargs: Any) -> Any:
        value = super().decode(s, *args, **kwargs)
        return storable_json(value) if "\\u" in s else value
