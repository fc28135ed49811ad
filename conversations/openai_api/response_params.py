"""A `POST /responses` body's settings besides its input, tools and destination, each read
and checked by its parameter (a 400 naming it, as OpenAI's API answers), into what the
model is sent (Run.generation) and what the response echoes (Run.options).

Every parameter of Open Responses' `CreateResponseBody` is taken. What Parley honours goes
to the model or the loop (sampling, penalties, `reasoning.effort`, `max_tool_calls`,
`truncation`); what it cannot honour is refused when honouring it matters to the client
(JSON output, log probabilities), else accepted and echoed (`service_tier`,
`safety_identifier`, `prompt_cache_key`, `text.verbosity`, `include`, ...).
"""

from typing import Any

from conversations.openai_api.errors import fields_check, invalid, quoted, wrong_type

_EFFORTS = ("none", "low", "medium", "high", "xhigh")
_SUMMARIES = ("concise", "detailed", "auto")
_VERBOSITIES = ("low", "medium", "high")
_TRUNCATIONS = ("auto", "disabled")
_SERVICE_TIERS = ("auto", "default", "flex", "priority")
_IDENTIFIER_MAX = 64
_TOP_LOGPROBS_MAX = 20


def flag(body: dict[str, Any], name: str, default: bool) -> bool:
    value = body.get(name)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise wrong_type(name, "a boolean", value)
    return value


def number(body: dict[str, Any], name: str, low: float, high: float) -> float | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise wrong_type(name, "a number", value)
    if not low <= value <= high:
        raise invalid(f"Invalid '{name}': must be from {low:g} to {high:g}.", param=name)
    return float(value)


def integer(body: dict[str, Any], name: str, *, low: int) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise wrong_type(name, "an integer", value)
    if value < low:
        raise invalid(f"Invalid '{name}': must be at least {low}.", param=name)
    return value


def string(body: dict[str, Any], name: str, *, most: int | None = None) -> str | None:
    value = body.get(name)
    if value is None:
        return None
    if not isinstance(value, str):
        raise wrong_type(name, "a string", value)
    if most is not None and len(value) > most:
        raise invalid(f"Invalid '{name}': at most {most} characters.", param=name)
    return value


def choice(value: Any, name: str, choices: tuple[str, ...]) -> str | None:
    """One of `choices`, or None for null."""
    if value is None:
        return None
    if value not in choices:
        raise invalid(
            f"Invalid value for '{name}': {quoted(value)!r}; expected one of {', '.join(choices)}.",
            param=name,
        )
    return str(value)


def _object(value: Any, name: str, known: set[str]) -> dict[str, Any] | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise wrong_type(name, "an object", value)
    fields_check(value, name, required=set(), known=known)
    return value


def _text(value: Any) -> dict[str, Any]:
    """The `text` echo. Replies are plain text: a client asking for JSON (`json_schema`,
    `json_object`) must hear that it would get prose, not find out by parsing it."""
    text = _object(value, "text", {"format", "verbosity"}) or {}
    form = text.get("format")
    if form is not None:
        if not isinstance(form, dict):
            raise wrong_type("text.format", "an object", form)
        kind = form.get("type")
        if kind != "text":
            raise invalid(
                f"Invalid 'text.format.type': {quoted(kind)!r} is not supported; Parley "
                "replies in plain text ('text') and does not constrain replies to JSON.",
                param="text.format.type",
                code="unsupported_value",
            )
    verbosity = choice(text.get("verbosity"), "text.verbosity", _VERBOSITIES)
    # Unsaid, the model's own verbosity: what "medium" means.
    return {"format": {"type": "text"}, "verbosity": verbosity or "medium"}


def _reasoning(value: Any) -> dict[str, Any] | None:
    # `generate_summary`: OpenAI's older name of `summary`, still sent by some clients.
    reasoning = _object(value, "reasoning", {"effort", "summary", "generate_summary"})
    if reasoning is None:
        return None
    older = choice(reasoning.get("generate_summary"), "reasoning.generate_summary", _SUMMARIES)
    return {
        "effort": choice(reasoning.get("effort"), "reasoning.effort", _EFFORTS),
        "summary": choice(reasoning.get("summary"), "reasoning.summary", _SUMMARIES) or older,
    }


def _top_logprobs(body: dict[str, Any]) -> int:
    value = integer(body, "top_logprobs", low=0) or 0
    if value > _TOP_LOGPROBS_MAX:
        raise invalid(
            f"Invalid 'top_logprobs': must be from 0 to {_TOP_LOGPROBS_MAX}.", param="top_logprobs"
        )
    if value:
        raise invalid(
            "Invalid 'top_logprobs': Parley returns no log probabilities; send 0 or null.",
            param="top_logprobs",
            code="unsupported_value",
        )
    return value


def _accepted(body: dict[str, Any]) -> None:
    """Parameters that change nothing here, checked for their type so a mistake is told."""
    include = body.get("include")
    if include is not None:
        if not isinstance(include, list):
            raise wrong_type("include", "an array", include)
        for index, item in enumerate(include):
            if not isinstance(item, str):
                raise wrong_type(f"include[{index}]", "a string", item)
    options = _object(body.get("stream_options"), "stream_options", {"include_obfuscation"})
    obfuscation = (options or {}).get("include_obfuscation")
    if obfuscation is not None and not isinstance(obfuscation, bool):
        raise wrong_type("stream_options.include_obfuscation", "a boolean", obfuscation)
    string(body, "user")


def settings_read(body: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(what the model and the loop are sent: Run.generation, what the response echoes
    besides: Run.options) from the request's settings."""
    # Any positive limit is taken (the model server takes one), though the specification
    # asks clients for 16 or more.
    limit = integer(body, "max_output_tokens", low=1)
    max_tool_calls = integer(body, "max_tool_calls", low=1)
    reasoning = _reasoning(body.get("reasoning"))
    truncation = choice(body.get("truncation"), "truncation", _TRUNCATIONS) or "auto"
    _accepted(body)
    generation: dict[str, Any] = {
        "temperature": number(body, "temperature", 0, 2),
        "top_p": number(body, "top_p", 0, 1),
        "presence_penalty": number(body, "presence_penalty", -2, 2),
        "frequency_penalty": number(body, "frequency_penalty", -2, 2),
        "max_output_tokens": limit,
        "parallel_tool_calls": flag(body, "parallel_tool_calls", True)
        if body.get("parallel_tool_calls") is not None
        else None,
        "reasoning_effort": reasoning["effort"] if reasoning else None,
        "max_tool_calls": max_tool_calls,
        # Only the exception is kept: dropping the oldest turns is what every run does.
        "truncation": "disabled" if truncation == "disabled" else None,
    }
    options: dict[str, Any] = {
        "truncation": truncation,
        "text": _text(body.get("text")),
        "reasoning": reasoning,
        "max_tool_calls": max_tool_calls,
        "service_tier": choice(body.get("service_tier"), "service_tier", _SERVICE_TIERS),
        "safety_identifier": string(body, "safety_identifier", most=_IDENTIFIER_MAX),
        "prompt_cache_key": string(body, "prompt_cache_key", most=_IDENTIFIER_MAX),
        "top_logprobs": _top_logprobs(body),
    }
    return {key: value for key, value in generation.items() if value is not None}, options
