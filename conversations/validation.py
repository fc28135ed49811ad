"""Field rules shared by the services and the importer, so both refuse the same things."""

import unicodedata
from typing import Any

from django.conf import settings

from accounts.text import storable_json as storable_json
from accounts.text import storable_text as storable_text
from accounts.text import unencodable as _unencodable
from accounts.text import unstorable_reason
from conversations.errors import Problem
from conversations.models.organising import FOLDER_NAME_MAX, TAG_NAME_MAX

TITLE_MAX = 200
MODEL_MAX = 100
METADATA_MAX_KEYS = 16
METADATA_KEY_MAX = 64
METADATA_VALUE_MAX = 512
# Message.tool_call_id and Message.name are varchar(200): PostgreSQL refuses longer values.
TOOL_CALL_ID_MAX = 200
TOOL_NAME_MAX = 200


def text_problems(value: Any, *, path: str, max_chars: int) -> list[Problem]:
    if not isinstance(value, str):
        return [Problem(path, f"must be a string, not {type_name(value)}")]
    if len(value) > max_chars:
        return [Problem(path, f"is {len(value)} characters long; the limit is {max_chars}")]
    reason = unstorable_reason(value)
    return [Problem(path, reason)] if reason else []


def title_problems(value: Any, *, path: str = "$.title") -> list[Problem]:
    return text_problems(value, path=path, max_chars=TITLE_MAX)


def system_prompt_problems(value: Any, *, path: str = "$.system_prompt") -> list[Problem]:
    return text_problems(value, path=path, max_chars=settings.PARLEY_MAX_SYSTEM_PROMPT_CHARS)


def model_problems(value: Any, *, path: str = "$.model") -> list[Problem]:
    return text_problems(value, path=path, max_chars=MODEL_MAX)


def draft_problems(value: Any, *, path: str = "$.draft") -> list[Problem]:
    return text_problems(value, path=path, max_chars=settings.PARLEY_MAX_DRAFT_CHARS)


def content_problems(value: Any, *, path: str = "$.content") -> list[Problem]:
    return text_problems(value, path=path, max_chars=settings.PARLEY_MAX_MESSAGE_CHARS)


# A conversation without a title takes one from its first message, this long at most.
TITLE_FROM_MESSAGE_CHARS = 80


def title_from_message(content: str, *, filename: str = "") -> str:
    """A conversation's title from its first user message: its words, or the name of its
    first file when it says nothing."""
    first_line = " ".join(content.split()) or " ".join(filename.split())
    if len(first_line) <= TITLE_FROM_MESSAGE_CHARS:
        return first_line
    return first_line[: TITLE_FROM_MESSAGE_CHARS - 1].rstrip() + "…"


def temperature_problems(value: Any, *, path: str = "$.temperature") -> list[Problem]:
    """Sampling temperature: a number from 0 to 2, or null for the server's default."""
    if value is None:
        return []
    if isinstance(value, bool) or not isinstance(value, int | float):
        return [Problem(path, f"must be a number or null, not {type_name(value)}")]
    if not 0 <= value <= 2:
        return [Problem(path, "must be between 0 and 2")]
    return []


def max_output_tokens_problems(value: Any, *, path: str = "$.max_output_tokens") -> list[Problem]:
    """A reply's token cap: a whole number from 1 to PARLEY_MAX_OUTPUT_TOKENS, or null for
    the server's default."""
    if value is None:
        return []
    cap = settings.PARLEY_MAX_OUTPUT_TOKENS
    if isinstance(value, bool) or not isinstance(value, int):
        return [Problem(path, f"must be a whole number or null, not {type_name(value)}")]
    if not 1 <= value <= cap:
        return [Problem(path, f"must be between 1 and {cap}")]
    return []


def vision_problems(value: Any, *, path: str = "$.vision") -> list[Problem]:
    """Whether the model takes images: true or false."""
    if not isinstance(value, bool):
        return [Problem(path, f"must be true or false, not {type_name(value)}")]
    return []


def metadata_problems(value: Any, *, path: str = "$.metadata") -> list[Problem]:
    if not isinstance(value, dict):
        return [Problem(path, f"must be an object, not {type_name(value)}")]
    problems = []
    if len(value) > METADATA_MAX_KEYS:
        problems.append(Problem(path, f"has {len(value)} keys; the limit is {METADATA_MAX_KEYS}"))
    for key, item in value.items():
        # Keys are text too: jsonb refuses NUL in them, and no database holds a surrogate.
        key_problems = text_problems(key, path=key_path(path, key), max_chars=METADATA_KEY_MAX)
        if key_problems:
            problems += [Problem(p.path, f"key {p.message}") for p in key_problems]
            continue
        problems += text_problems(item, path=key_path(path, key), max_chars=METADATA_VALUE_MAX)
    return problems


def name_problems(value: Any, *, path: str, max_chars: int) -> list[Problem]:
    """A tag's or a folder's name: text of 1 to `max_chars` characters once stripped, on
    one line (no control characters: it is shown as a label)."""
    if not isinstance(value, str):
        return [Problem(path, f"must be a string, not {type_name(value)}")]
    name = value.strip()
    if not name:
        return [Problem(path, "must not be empty")]
    problems = text_problems(name, path=path, max_chars=max_chars)
    if not problems and any(unicodedata.category(char) == "Cc" for char in name):
        problems.append(Problem(path, "must not contain control characters"))
    return problems


def folder_name_problems(value: Any, *, path: str = "$.name") -> list[Problem]:
    return name_problems(value, path=path, max_chars=FOLDER_NAME_MAX)


def tag_names_problems(value: Any, *, path: str = "$.tags") -> list[Problem]:
    """A conversation's tags: a list of names, at most PARLEY_MAX_TAGS_PER_CONVERSATION."""
    if not isinstance(value, list):
        return [Problem(path, f"must be a list, not {type_name(value)}")]
    limit = settings.PARLEY_MAX_TAGS_PER_CONVERSATION
    if len(value) > limit:
        return [Problem(path, f"has {len(value)} tags; the limit is {limit}")]
    return [
        problem
        for index, name in enumerate(value)
        for problem in name_problems(name, path=f"{path}[{index}]", max_chars=TAG_NAME_MAX)
    ]


def key_path(path: str, key: Any) -> str:
    """`path.key`, with a key that is not storable text (or very long) shown escaped and
    cut, so the error that names it can itself be sent."""
    shown = str(key)[:40]
    if not shown.isprintable() or _unencodable(shown):
        shown = shown.encode("utf-8", "backslashreplace").decode("ascii", "backslashreplace")
        shown = shown.encode("unicode_escape").decode("ascii")
    return f"{path}.{shown}{'…' if len(str(key)) > 40 else ''}"


# What a provider reports of a reply's usage, and so what an import may carry: the three
# counts, and OpenAI's breakdowns of them.
USAGE_COUNTS = ("prompt_tokens", "completion_tokens", "total_tokens")
USAGE_BREAKDOWNS = ("prompt_tokens_details", "completion_tokens_details")
# Fields one breakdown may have (OpenAI reports two to four).
USAGE_BREAKDOWN_MAX_FIELDS = 16


def usage_problems(value: Any, *, path: str) -> list[Problem]:
    """Usage from outside (an import): known keys only, each a whole number of tokens
    within PARLEY_IMPORT_MAX_USAGE_TOKENS, so nobody can forge the usage figures or
    overflow the sums that add them up."""
    if value is None:
        return []
    if not isinstance(value, dict):
        return [Problem(path, f"must be an object or null, not {type_name(value)}")]
    problems = []
    for key, item in value.items():
        item_path = key_path(path, key)
        if key in USAGE_COUNTS:
            problems += _token_count_problems(item, path=item_path)
        elif key in USAGE_BREAKDOWNS:
            if not isinstance(item, dict):
                problems.append(Problem(item_path, f"must be an object, not {type_name(item)}"))
                continue
            if len(item) > USAGE_BREAKDOWN_MAX_FIELDS:
                problems.append(
                    Problem(item_path, f"has more than {USAGE_BREAKDOWN_MAX_FIELDS} fields")
                )
                continue
            for part, count in item.items():
                if not _usage_part_name(part):
                    problems.append(Problem(key_path(item_path, part), "is not a usage field"))
                else:
                    problems += _token_count_problems(count, path=key_path(item_path, part))
        else:
            known = ", ".join((*USAGE_COUNTS, *USAGE_BREAKDOWNS))
            problems.append(Problem(item_path, f"is not a usage field; known fields: {known}"))
    return problems


def usage_known(value: Any) -> dict[str, Any] | None:
    """The part of a stored usage an export carries: exactly what an import accepts, so
    export -> import -> export gives the same document. Fields some providers add beyond
    the counts and their breakdowns (or counts no import would take) are left out."""
    if not isinstance(value, dict):
        return None
    known: dict[str, Any] = {}
    for key, item in value.items():
        if key in USAGE_COUNTS and not _token_count_problems(item, path=""):
            known[key] = item
        elif key in USAGE_BREAKDOWNS and isinstance(item, dict):
            parts = [
                (part, count)
                for part, count in item.items()
                if _usage_part_name(part) and not _token_count_problems(count, path="")
            ]
            known[key] = dict(parts[:USAGE_BREAKDOWN_MAX_FIELDS])
    return known


def _usage_part_name(part: Any) -> bool:
    return isinstance(part, str) and not _unencodable(part) and part.isidentifier()


def _token_count_problems(value: Any, *, path: str) -> list[Problem]:
    limit = settings.PARLEY_IMPORT_MAX_USAGE_TOKENS
    if value is None:
        return []
    if not isinstance(value, int) or isinstance(value, bool):
        return [Problem(path, f"must be a whole number of tokens, not {type_name(value)}")]
    if not 0 <= value <= limit:
        return [Problem(path, f"must be between 0 and {limit}")]
    return []


def type_name(value: Any) -> str:
    """JSON's name for a Python value's type, for error messages people can act on."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__
