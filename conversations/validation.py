"""Field rules shared by the services and the importer, so both refuse the same things."""

from typing import Any

from django.conf import settings

from conversations.errors import Problem

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
    # PostgreSQL text cannot hold NUL, so refuse it everywhere rather than fail on one backend.
    if "\x00" in value:
        return [Problem(path, "contains a NUL character, which cannot be stored")]
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        # A lone surrogate: not text any database (or UTF-8 document) can hold.
        return [Problem(path, "contains an unpaired surrogate, which is not valid text")]
    return []


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


def tools_problems(value: Any, *, path: str = "$.tools") -> list[Problem]:
    # Imported here: the registry's built-in tools use the services, which use this module.
    from conversations.llm.tools import tool_catalog

    registered = [entry["name"] for entry in tool_catalog()]
    if not isinstance(value, list):
        return [Problem(path, f"must be a list of tool names, not {type_name(value)}")]
    problems = []
    seen: set[str] = set()
    for index, name in enumerate(value):
        item_path = f"{path}[{index}]"
        if not isinstance(name, str):
            problems.append(Problem(item_path, f"must be a string, not {type_name(name)}"))
        elif name not in registered:
            known = ", ".join(registered)
            problems.append(Problem(item_path, f"unknown tool {name!r}; known tools: {known}"))
        elif name in seen:
            problems.append(Problem(item_path, f"tool {name!r} is listed twice"))
        else:
            seen.add(name)
    return problems


def metadata_problems(value: Any, *, path: str = "$.metadata") -> list[Problem]:
    if not isinstance(value, dict):
        return [Problem(path, f"must be an object, not {type_name(value)}")]
    problems = []
    if len(value) > METADATA_MAX_KEYS:
        problems.append(Problem(path, f"has {len(value)} keys; the limit is {METADATA_MAX_KEYS}"))
    for key, item in value.items():
        if len(key) > METADATA_KEY_MAX:
            problems.append(
                Problem(f"{path}.{key[:20]}…", f"key is longer than {METADATA_KEY_MAX} characters")
            )
            continue
        # PostgreSQL's jsonb refuses NUL in keys too, not only in values.
        if "\x00" in key:
            problems.append(
                Problem(f"{path}.{key!r}", "key contains a NUL character, which cannot be stored")
            )
            continue
        problems += text_problems(item, path=f"{path}.{key}", max_chars=METADATA_VALUE_MAX)
    return problems


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
