"""Domain errors raised by services; the API and UI turn them into clear 4xx answers."""

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Problem:
    """One thing wrong with an input, located by a JSON path such as `$.messages[3].role`."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


@dataclass
class ValidationFailed(Exception):
    """Input was refused; nothing was stored. Carries every problem found, not just the first."""

    problems: list[Problem] = field(default_factory=list)
    # "invalid_json" when the input is not acceptable JSON at all (syntax, nesting,
    # numbers, unstorable text), so callers can tell it from a wrong value.
    code: str = "invalid"

    def __str__(self) -> str:
        return "; ".join(str(p) for p in self.problems)


RUN_ACTIVE_MESSAGE = (
    "A reply is still being generated in this conversation; wait for it or cancel it."
)


class Conflict(Exception):
    """The request is valid but clashes with the current state (e.g. a run is active)."""


class DraftEditedMeanwhile(Conflict):
    """The assistant's draft write was refused: the user changed the draft after the model
    read it, and the user's words win. `draft` is the user's draft as it is now."""

    def __init__(self, draft: str) -> None:
        super().__init__("the user edited the draft after the model read it")
        self.draft = draft


class QuotaExceeded(Exception):
    """The user reached a configured quota (conversations, messages per day); nothing stored.

    `code` names the quota so the API and the UI can say which one.
    """

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
