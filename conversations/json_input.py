"""Reading JSON that came from outside: request bodies, websocket frames, imports, cursors,
stateless state.

One reader, so every door refuses the same things before anything is stored:

- nesting deeper than PARLEY_JSON_MAX_DEPTH (deep documents exhaust the recursion of
  every recursive reader after the parser, and serve no purpose here);
- numbers no column can hold: `NaN`, `Infinity`, overflowing floats such as `1e400`, and
  integers outside 64 bits;
- text that cannot be stored: NUL (PostgreSQL refuses it in text and jsonb) and unpaired
  surrogates (`"\\ud800"` is valid JSON, but not valid Unicode), in values and in keys.

Each refusal names the JSON path of what was refused.
"""

import json
import math
from typing import Any

from django.conf import settings

from conversations.validation import storable_json, unstorable_reason

INT_LIMIT = 2**63 - 1


class JsonInputError(ValueError):
    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}" if path != "$" else message)
        self.path = path
        self.message = message


def _refuse_constant(name: str) -> Any:
    raise JsonInputError("$", f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise JsonInputError("$", f"the number {text[:40]} is too large")
    return value


def _bounded_int(text: str) -> int:
    # Checked on the digits first: int() of a huge digit string is itself expensive.
    if len(text.lstrip("-")) > 19 or not -INT_LIMIT - 1 <= int(text) <= INT_LIMIT:
        raise JsonInputError("$", f"the integer {text[:40]} is outside 64 bits")
    return int(text)


def json_parse(raw: bytes | str, *, max_depth: int | None = None, check: bool = True) -> Any:
    """Parse `raw` and check all of the above (with check=False, only the syntax and the
    numbers: the caller runs json_problems itself). Raises JsonInputError."""
    limit = settings.PARLEY_JSON_MAX_DEPTH if max_depth is None else max_depth
    try:
        value = json.loads(
            raw,
            parse_constant=_refuse_constant,
            parse_float=_finite_float,
            parse_int=_bounded_int,
        )
    except JsonInputError:
        raise
    except RecursionError:
        raise JsonInputError("$", f"nesting is deeper than {limit} levels") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise JsonInputError("$", f"not valid JSON: {_safe(str(exc))}") from None
    if check:
        problems = json_problems(value, max_depth=limit, first_only=True)
        if problems:
            raise problems[0]
    return value


def json_parse_repaired(raw: str, *, max_depth: int | None = None) -> Any:
    """JSON written by a model (tool call arguments): nesting and numbers are checked as
    for a client, but its text cannot be refused, so unstorable text is repaired
    (validation.storable_text) instead. Raises JsonInputError."""
    value = json_parse(raw, max_depth=max_depth, check=False)
    too_deep = json_problems(value, max_depth=max_depth, first_only=True, texts=False)
    if too_deep:
        raise too_deep[0]
    return storable_json(value)


def json_problems(
    value: Any, *, max_depth: int | None = None, first_only: bool = False, texts: bool = True
) -> list[JsonInputError]:
    """The depth and (unless texts=False) text problems of a parsed value, in document
    order. Iterative, so a deep value cannot exhaust the recursion here; nothing below the
    depth limit is read."""
    limit = settings.PARLEY_JSON_MAX_DEPTH if max_depth is None else max_depth
    found: list[JsonInputError] = []
    stack: list[tuple[Any, str, int]] = [(value, "$", 0)]
    while stack and not (first_only and found):
        item, path, depth = stack.pop()
        if isinstance(item, str):
            found += _text_problems(item, path) if texts else []
        elif isinstance(item, dict | list):
            if depth >= limit:
                found.append(JsonInputError(path, f"nesting is deeper than {limit} levels"))
                continue
            children: list[tuple[Any, str, int]] = []
            if isinstance(item, dict):
                for key, child in item.items():
                    child_path = f"{path}.{_safe(key)[:64]}"
                    found += _text_problems(key, child_path) if texts else []
                    children.append((child, child_path, depth + 1))
            else:
                children = [(child, f"{path}[{i}]", depth + 1) for i, child in enumerate(item)]
            stack.extend(reversed(children))
    return found


def is_too_deep(problem: JsonInputError) -> bool:
    return problem.message.startswith("nesting is deeper")


def _text_problems(text: str, path: str) -> list[JsonInputError]:
    reason = unstorable_reason(text)
    return [JsonInputError(path, reason)] if reason else []


def _safe(text: str) -> str:
    """Text that can be sent back in an error: anything unstorable shown escaped."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text.replace("\x00", "\\x00")
