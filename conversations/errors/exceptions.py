"""The domain's refusals: one exception class carrying a vocabulary code, a message and
details, and the conditions with a payload of their own as subclasses. Services and the
engine raise them; each door renders them in its own shape."""

from dataclasses import dataclass
from typing import Any

from conversations.errors.vocabulary import (
    CONVERSATION_QUOTA_EXCEEDED,
    DRAFT_EDITED_MEANWHILE,
    INVALID,
    INVALID_IMPORT,
    INVALID_JSON,
    MESSAGE_QUOTA_EXCEEDED,
    NOT_FOUND,
    RUN_ACTIVE,
    THROTTLED,
    VOCABULARY,
    ErrorCode,
)


class ParleyError(Exception):
    """A refusal in the vocabulary: `code` (stable), `message` (for people), `details`
    (for programs, e.g. `problems`); nothing was done."""

    def __init__(
        self, error: ErrorCode, message: str | None = None, details: dict[str, Any] | None = None
    ) -> None:
        if VOCABULARY.get(error.code) is not error:
            raise ValueError(f"{error.code!r} is not a code of the vocabulary")
        self.error = error
        self.message = message or error.message
        self.details = details or {}
        super().__init__(self.message)

    @property
    def code(self) -> str:
        return self.error.code

    @property
    def status(self) -> int:
        """The status /api/v1/ answers with."""
        return self.error.status


@dataclass(frozen=True)
class Problem:
    """One thing wrong with an input, located by a JSON path such as `$.messages[3].role`."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


class ValidationFailed(ParleyError):
    """Input was refused; nothing was stored. Carries every problem found, not just the
    first, each with its JSON path (`details.problems`)."""

    CODES = (INVALID, INVALID_JSON, INVALID_IMPORT)

    def __init__(
        self,
        problems: list[Problem] | None = None,
        error: ErrorCode = INVALID,
        *,
        message: str | None = None,
        details: dict[str, Any] | None = None,
    ) -> None:
        if error not in self.CODES:
            raise ValueError(f"{error.code!r} is not a refusal of the input")
        self.problems = list(problems or [])
        listed = {"problems": [{"path": p.path, "message": p.message} for p in self.problems]}
        super().__init__(
            error,
            message or _summary(self.problems),
            {**(listed if self.problems else {}), **(details or {})},
        )

    def __str__(self) -> str:
        return "; ".join(str(p) for p in self.problems) or self.message


def _summary(problems: list[Problem]) -> str:
    if not problems:
        return INVALID.message
    more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
    return f"Invalid request: {problems[0]}{more}."


class NotFound(ParleyError):
    """No such object for this user: unknown, malformed or someone else's alike."""

    def __init__(self, message: str | None = None) -> None:
        super().__init__(NOT_FOUND, message)


class RunActive(ParleyError):
    """The request is valid but a reply is still being generated in the conversation."""

    def __init__(self, message: str | None = None) -> None:
        super().__init__(RUN_ACTIVE, message)


class DraftEditedMeanwhile(ParleyError):
    """The assistant's draft write was refused: the user changed the draft after the model
    read it, and the user's words win. `draft` is the user's draft as it is now."""

    def __init__(self, draft: str) -> None:
        super().__init__(DRAFT_EDITED_MEANWHILE)
        self.draft = draft


class QuotaExceeded(ParleyError):
    """The user reached a configured quota (conversations, messages per day); nothing
    stored. The code names the quota so every client can say which one."""

    CODES = (CONVERSATION_QUOTA_EXCEEDED, MESSAGE_QUOTA_EXCEEDED)

    def __init__(self, error: ErrorCode, message: str | None = None) -> None:
        if error not in self.CODES:
            raise ValueError(f"{error.code!r} is not a quota")
        super().__init__(error, message)


class Throttled(ParleyError):
    """A request budget is spent; it comes back after `wait` seconds (None: unknown)."""

    def __init__(self, wait: int | None, message: str | None = None) -> None:
        if message is None:
            retry = f" Retry in {wait} seconds." if wait is not None else ""
            message = THROTTLED.message + retry
        super().__init__(THROTTLED, message, {"retry_after": wait} if wait is not None else None)
        self.wait = wait
