"""What a tool server's registration must hold, field by field and as a whole, each
problem by its JSON path (the admin's form shows them on its fields). A secret's value
is never part of a message."""

import re
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from django.contrib.auth.models import Group

from conversations.errors import Problem
from conversations.models import ToolServer, ToolServerAuth
from conversations.models.tool_servers import SERVER_NAME_MAX, TOOL_SEPARATOR
from conversations.validation import text_problems, type_name

# Groups of lowercase letters and digits joined by single hyphens or underscores: the
# name prefixes the server's tools (`<name>__<tool>`), so it never holds the separator.
NAME_PATTERN = re.compile(r"[a-z0-9]+(?:[-_][a-z0-9]+)*")
URL_MAX = 500
# Secrets and tokens go in an HTTP header: visible ASCII only.
SECRET_PATTERN = re.compile(r"[\x21-\x7e]+")
SECRET_MAX = 4096
# MCP's own rule for a tool's name.
TOOL_NAME_PATTERN = re.compile(r"[A-Za-z0-9_.-]{1,128}")
ALLOWED_TOOLS_MAX = 200
GROUPS_MAX = 100
TIMEOUT_MIN, TIMEOUT_MAX = 1, 600
# Every field a registration takes, in the order changes are named.
FIELDS = ("name", "url", "auth", "secret", "groups", "allowed_tools", "timeout_seconds", "enabled")
DEFAULTS: dict[str, Any] = {
    "auth": ToolServerAuth.NONE.value,
    "secret": None,
    "groups": [],
    "allowed_tools": [],
    "timeout_seconds": 30,
    "enabled": True,
}


def name_problems(value: Any, *, server: ToolServer | None) -> list[Problem]:
    path = "$.name"
    problems = text_problems(value, path=path, max_chars=SERVER_NAME_MAX)
    if problems:
        return problems
    if not NAME_PATTERN.fullmatch(value) or TOOL_SEPARATOR in value:
        return [
            Problem(
                path,
                "must be lowercase letters and digits, joined by single hyphens or "
                "underscores (it names the server's tools to the model)",
            )
        ]
    taken = ToolServer.objects.filter(name=value)
    if server is not None:
        taken = taken.exclude(pk=server.pk)
    return [Problem(path, "is taken by another tool server")] if taken.exists() else []


def url_problems(value: Any) -> list[Problem]:
    path = "$.url"
    problems = text_problems(value, path=path, max_chars=URL_MAX)
    if problems:
        return problems
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 (raises for a port that is not one)
    except ValueError:
        return [Problem(path, "is not a URL")]
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return [Problem(path, "must be an http:// or https:// URL with a host")]
    if any(char.isspace() for char in value):
        return [Problem(path, "must not contain spaces")]
    if parts.username is not None or parts.password is not None:
        # The URL is shown to staff and written in the audit trail; a secret is not.
        return [Problem(path, "must not carry a user or password: set the secret instead")]
    if parts.fragment:
        return [Problem(path, "must not have a #fragment")]
    return []


def auth_problems(value: Any) -> list[Problem]:
    if value not in ToolServerAuth.values:
        choices = ", ".join(ToolServerAuth.values)
        return [Problem("$.auth", f"must be one of {choices}")]
    return []


def secret_problems(value: Any, *, path: str = "$.secret") -> list[Problem]:
    """A secret or token: None or "" (clearing, where the caller allows it) or visible
    ASCII. Messages never quote it."""
    if value is None or value == "":
        return []
    if not isinstance(value, str):
        return [Problem(path, f"must be a string, not {type_name(value)}")]
    if len(value) > SECRET_MAX:
        return [Problem(path, f"is longer than {SECRET_MAX} characters")]
    if not SECRET_PATTERN.fullmatch(value):
        return [
            Problem(
                path, "must be visible ASCII characters, without spaces (it is sent in a header)"
            )
        ]
    return []


def groups_problems(value: Any) -> list[Problem]:
    path = "$.groups"
    if not isinstance(value, list):
        return [Problem(path, f"must be a list of group names, not {type_name(value)}")]
    if len(value) > GROUPS_MAX:
        return [Problem(path, f"names more than {GROUPS_MAX} groups")]
    problems = [
        Problem(f"{path}[{index}]", f"must be a string, not {type_name(name)}")
        for index, name in enumerate(value)
        if not isinstance(name, str)
    ]
    if problems:
        return problems
    known = set(Group.objects.filter(name__in=value).values_list("name", flat=True))
    return [
        Problem(f"{path}[{index}]", "names no group")
        for index, name in enumerate(value)
        if name not in known
    ]


def allowed_tools_problems(value: Any) -> list[Problem]:
    path = "$.allowed_tools"
    if not isinstance(value, list):
        return [Problem(path, f"must be a list of tool names, not {type_name(value)}")]
    if len(value) > ALLOWED_TOOLS_MAX:
        return [Problem(path, f"names more than {ALLOWED_TOOLS_MAX} tools")]
    problems, seen = [], set()
    for index, name in enumerate(value):
        item = f"{path}[{index}]"
        if not isinstance(name, str):
            problems.append(Problem(item, f"must be a string, not {type_name(name)}"))
        elif not TOOL_NAME_PATTERN.fullmatch(name):
            problems.append(
                Problem(item, "must be 1 to 128 letters, digits, underscores, hyphens or dots")
            )
        elif name in seen:
            problems.append(Problem(item, "is named twice"))
        else:
            seen.add(name)
    return problems


def timeout_problems(value: Any) -> list[Problem]:
    if isinstance(value, bool) or not isinstance(value, int):
        return [Problem("$.timeout_seconds", f"must be a whole number, not {type_name(value)}")]
    if not TIMEOUT_MIN <= value <= TIMEOUT_MAX:
        return [Problem("$.timeout_seconds", f"must be from {TIMEOUT_MIN} to {TIMEOUT_MAX}")]
    return []


def enabled_problems(value: Any) -> list[Problem]:
    return [] if isinstance(value, bool) else [Problem("$.enabled", "must be true or false")]


def tool_server_problems(*, server: ToolServer | None, changes: dict[str, Any]) -> list[Problem]:
    """Everything wrong with registering a server (`server` None) with `changes`, or with
    changing `server` by them; only the fields `changes` holds are checked one by one."""
    problems = [
        Problem(f"$.{name}", "is not a field of a tool server")
        for name in changes
        if name not in FIELDS
    ]
    if server is None:
        problems += [
            Problem(f"$.{name}", "is required") for name in ("name", "url") if name not in changes
        ]
    checks: dict[str, Callable[[Any], list[Problem]]] = {
        "name": lambda value: name_problems(value, server=server),
        "url": url_problems,
        "auth": auth_problems,
        "secret": secret_problems,
        "groups": groups_problems,
        "allowed_tools": allowed_tools_problems,
        "timeout_seconds": timeout_problems,
        "enabled": enabled_problems,
    }
    for name, value in changes.items():
        if name in checks:
            problems += checks[name](value)
    if problems:
        return problems
    auth = changes.get("auth", server.auth if server is not None else DEFAULTS["auth"])
    secret = changes.get("secret")
    if secret and auth != ToolServerAuth.SHARED:
        return [Problem("$.secret", "is only for a server whose auth is 'shared'")]
    has_secret = bool(secret) if "secret" in changes else bool(server and server.secret_encrypted)
    if auth == ToolServerAuth.SHARED and not has_secret:
        return [Problem("$.secret", "is required: a 'shared' server sends one secret for everyone")]
    return []
