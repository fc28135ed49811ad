"""The one rule for text any database can store, shared by every app: it lives in
`accounts`, the app the others build on, so `accounts` itself never imports them."""


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
