"""Importing a ChatGPT data export: every conversation in it becomes a Parley conversation.

Each conversation is converted (formats/chatgpt.py) and stored through the ordinary
import (`conversation_import`), so it is checked exactly like a Parley export and stored
all or nothing; one conversation failing never stops the others. The report says, for
each conversation in the file, whether it was imported and, if not, why, with every
problem's JSON path pointing into the export file.
"""

import json
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from django.db import DatabaseError
from django.db.models import prefetch_related_objects

from accounts.models import User
from config.log_context import exception_for_log
from conversations.errors import INVALID, INVALID_IMPORT, Problem, QuotaExceeded, ValidationFailed
from conversations.formats.chatgpt import (
    ChatGPTConversion,
    chatgpt_export_conversions,
    chatgpt_export_read,
    conversation_labels,
)
from conversations.models import Conversation
from conversations.serializers import conversation_payload
from conversations.services.imports import conversation_import
from conversations.validation import key_path

log = logging.getLogger(__name__)

_MESSAGE_PATH = re.compile(r"\$\.messages\[(\d+)\](.*)")


@dataclass(frozen=True)
class ChatGPTImportResult:
    """One conversation of the export: the conversation stored, or the error that kept it
    out (`{"code", "message", "details"?}`, as the API words errors)."""

    index: int
    title: str
    chatgpt_id: str
    conversation: Conversation | None = None
    error: dict[str, Any] | None = None

    @property
    def status(self) -> Literal["imported", "failed"]:
        return "imported" if self.conversation is not None else "failed"

    def problems(self) -> list[Problem]:
        if self.error is None:
            return []
        listed = (self.error.get("details") or {}).get("problems", [])
        return [Problem(p["path"], p["message"]) for p in listed]

    def payload(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "title": self.title,
            "chatgpt_id": self.chatgpt_id or None,
            "status": self.status,
            "conversation": conversation_payload(self.conversation) if self.conversation else None,
            "error": self.error,
        }


@dataclass(frozen=True)
class ChatGPTImportReport:
    results: list[ChatGPTImportResult]

    @property
    def imported(self) -> int:
        return sum(1 for result in self.results if result.status == "imported")

    @property
    def failed(self) -> int:
        return len(self.results) - self.imported

    def problems(self) -> list[Problem]:
        """Every failed conversation's problems, paths into the export file."""
        return [problem for result in self.results for problem in result.problems()]

    def summary(self) -> str:
        total = len(self.results)
        if not total:
            return "The export holds no conversations."
        if not self.imported:
            first = next(iter(self.problems()), None)
            reason = f": {first}" if first else ""
            return f"None of the {total} conversation(s) could be imported{reason}."
        return f"Imported {self.imported} of {total} conversation(s)."

    def payload(self) -> dict[str, Any]:
        # Their tags in one query, not one per conversation.
        stored = [result.conversation for result in self.results if result.conversation]
        prefetch_related_objects(stored, "tags")
        return {
            "results": [result.payload() for result in self.results],
            "imported": self.imported,
            "failed": self.failed,
        }


def _error(code: str, message: str, problems: list[Problem] | None = None) -> dict[str, Any]:
    error: dict[str, Any] = {"code": code, "message": message}
    if problems:
        error["details"] = {"problems": [{"path": p.path, "message": p.message} for p in problems]}
    return error


def _invalid(code: str, problems: list[Problem]) -> dict[str, Any]:
    first = problems[0] if problems else None
    message = f"Not imported: {first}" if first else "Not imported."
    if len(problems) > 1:
        message += f" (and {len(problems) - 1} more)"
    return _error(code, message, problems)


def _in_export(problems: list[Problem], path: str, sources: list[str]) -> list[Problem]:
    """Problems the ordinary import found in a converted document, pointed back at the
    export: a message's at the ChatGPT node it came from, the rest at the conversation."""
    found = []
    for problem in problems:
        message_path = _MESSAGE_PATH.fullmatch(problem.path)
        if message_path and int(message_path.group(1)) < len(sources):
            node = sources[int(message_path.group(1))]
            field = message_path.group(2).lstrip(".")
            where = key_path(f"{path}.mapping", node) + ".message"
            found.append(
                Problem(where, f"{field}: {problem.message}" if field else problem.message)
            )
        else:
            field = problem.path.removeprefix("$").lstrip(".")
            found.append(Problem(path, f"{field}: {problem.message}" if field else problem.message))
    return found


def _store(owner: User, conversion: ChatGPTConversion) -> ChatGPTImportResult:
    labels = (conversion.index, conversion.title, conversion.chatgpt_id)
    if conversion.converted is None:
        return ChatGPTImportResult(*labels, error=_invalid(conversion.code, conversion.problems))
    converted = conversion.converted
    document = json.dumps(converted.document, ensure_ascii=False)
    try:
        conversation = conversation_import(owner=owner, document=document)
    except ValidationFailed as exc:
        problems = _in_export(exc.problems, conversion.path, converted.sources)
        # Refused by the same checks as any export: still this importer's refusal.
        code = INVALID_IMPORT.code if exc.error is INVALID else exc.code
        return ChatGPTImportResult(*labels, error=_invalid(code, problems))
    except DatabaseError as exc:
        # The database refused what the checks let through: a bug to fix, but the other
        # conversations are no reason to stop (the import's transaction was rolled back).
        log.error(
            "storing ChatGPT conversation %s failed",
            conversion.index,
            exc_info=exception_for_log(exc),
        )
        message = "Not imported: the database refused it; nothing of it was stored."
        return ChatGPTImportResult(*labels, error=_error("storage_failed", message))
    return ChatGPTImportResult(*labels, conversation=conversation)


def conversations_import_chatgpt(
    *,
    owner: User,
    document: bytes,
    max_bytes: int | None = None,
    on_start: Callable[[int], None] | None = None,
    progress: Callable[[int], None] | None = None,
) -> ChatGPTImportReport:
    """Import every conversation of a ChatGPT export (`conversations.json`, or one
    conversation object) for `owner`, each all or nothing.

    `max_bytes` overrides PARLEY_IMPORT_MAX_BYTES for the file (the command line may take
    larger exports than the API). `on_start` is told how many conversations there are,
    `progress` is told of each one done. Raises ValidationFailed when the file as a whole
    cannot be read; once the owner's conversation quota is reached, the remaining
    conversations fail with the quota's message.
    """
    export = chatgpt_export_read(document, max_bytes=max_bytes)
    if on_start is not None:
        on_start(len(export.conversations))
    results: list[ChatGPTImportResult] = []
    quota: QuotaExceeded | None = None
    for conversion in chatgpt_export_conversions(export):
        if quota is not None:
            break
        try:
            results.append(_store(owner, conversion))
        except QuotaExceeded as exc:
            quota = exc
            labels = (conversion.index, conversion.title, conversion.chatgpt_id)
            results.append(ChatGPTImportResult(*labels, error=_quota_error(exc)))
        if progress is not None:
            progress(1)
    if quota is not None:
        # The rest are not even converted: none of them could be stored.
        for index in range(len(results), len(export.conversations)):
            title, chatgpt_id = conversation_labels(export.conversations[index])
            results.append(ChatGPTImportResult(index, title, chatgpt_id, error=_quota_error(quota)))
            if progress is not None:
                progress(1)
    return ChatGPTImportReport(results)


def _quota_error(exc: QuotaExceeded) -> dict[str, Any]:
    return _error(exc.code, f"Not imported: {exc.message}")
