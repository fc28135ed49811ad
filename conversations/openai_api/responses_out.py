"""A run as OpenAI's Response object.

The parts that never change after the request (id, model, what it asked for) come from
the run's row; the changing parts (status, output, usage, error) either from the stored
messages (`response_object`, for GET) or from the run's event log (stream.py, while it
streams). Both give the same items with the same ids: `msg_`/`fc_` ids name the assistant
message the run stored (its id is fixed before the reply streams), `fco_` the stored
tool result.
"""

from datetime import datetime
from typing import Any
from uuid import UUID

from django.conf import settings

from conversations import selectors
from conversations.models import Message, Run
from conversations.openai_api.ids import conversation_id, response_id
from conversations.openai_api.objects import message_items, rows_with_files
from conversations.serializers import run_payload

# Parley's run error codes as the codes OpenAI's Response.error allows.
_ERROR_CODES = {
    "rate_limited": "rate_limit_exceeded",
    "context_length_exceeded": "invalid_prompt",
    "bad_request": "invalid_prompt",
}
# Why a run ended incomplete, as OpenAI's incomplete_details.reason.
_INCOMPLETE_REASONS = {"max_output_tokens": "max_output_tokens", "max_iterations": "max_messages"}


def response_head(run: Run) -> dict[str, Any]:
    """The Response object's fields that the request fixed, with an empty output. Every
    key the Open Responses schema requires is present; a sampling setting the request left
    out says the value the model used (the conversation's, the server's, else the model's
    usual default)."""
    options, generation = run.options or {}, run.generation or {}
    given_conversation = options.get("conversation") and run.conversation_id
    previous = options.get("previous_run_id")
    return {
        "id": response_id(run.pk),
        "object": "response",
        "created_at": int(run.created_at.timestamp()),
        "completed_at": None,
        "status": "queued",
        "background": bool(options.get("background", False)),
        "error": None,
        "incomplete_details": None,
        "instructions": run.instructions or None,
        "max_output_tokens": generation.get("max_output_tokens"),
        "max_tool_calls": options.get("max_tool_calls"),
        "metadata": run.metadata or {},
        "model": run.model,
        "output": [],
        "parallel_tool_calls": _parallel_tool_calls(generation),
        "previous_response_id": response_id(UUID(previous)) if previous else None,
        "conversation": {"id": conversation_id(run.conversation_id)}
        if given_conversation
        else None,
        "reasoning": options.get("reasoning"),
        "store": bool(options.get("store", True)),
        "temperature": _sampling(generation.get("temperature"), _conversation_temperature(run)),
        "top_p": _sampling(generation.get("top_p"), None),
        "presence_penalty": float(generation.get("presence_penalty") or 0),
        "frequency_penalty": float(generation.get("frequency_penalty") or 0),
        "top_logprobs": int(options.get("top_logprobs") or 0),
        "text": options.get("text") or {"format": {"type": "text"}},
        "tool_choice": options.get("tool_choice", "auto"),
        "tools": options.get("tools", []),
        "truncation": options.get("truncation", "auto"),
        "service_tier": options.get("service_tier") or "default",
        "safety_identifier": options.get("safety_identifier"),
        "prompt_cache_key": options.get("prompt_cache_key"),
        "usage": None,
        "user": None,
    }


def _parallel_tool_calls(generation: dict[str, Any]) -> bool:
    value = generation.get("parallel_tool_calls")
    return True if value is None else bool(value)


def _conversation_temperature(run: Run) -> float | None:
    """The temperature the run's conversation sets, else the server's default. A stored
    run's conversation is read when the run came without it; a run kept nowhere carries
    an unsaved one, and a run built in memory has none to read."""
    loaded = Run._meta.get_field("conversation").is_cached(run)
    stored = not run._state.adding and run.conversation_id is not None
    conversation = run.conversation if loaded or stored else None
    own = conversation.temperature if conversation is not None else None
    default: float | None = settings.PARLEY_DEFAULT_TEMPERATURE
    return own if own is not None else default


def _sampling(value: Any, fallback: float | None) -> float:
    """A sampling setting as a number: the request's, else `fallback`, else 1 (the
    upstream's usual default when nothing is sent)."""
    chosen = value if value is not None else fallback
    return float(chosen) if chosen is not None else 1.0


def response_ending(response: dict[str, Any], run: dict[str, Any]) -> dict[str, Any]:
    """`response` with the status, usage, error and incomplete details of `run` (a run
    payload, as the event log and serializers.run_payload give it)."""
    status = run["status"]
    error = run.get("error") or None
    ended = {**response, "status": status, "usage": usage_object(run.get("usage"))}
    if status == Run.Status.COMPLETED and run.get("finished_at"):
        ended["completed_at"] = int(datetime.fromisoformat(run["finished_at"]).timestamp())
    if status == Run.Status.FAILED and error:
        code = _ERROR_CODES.get(error.get("code", ""), "server_error")
        ended["error"] = {"code": code, "message": f"{error.get('message', '')}"}
    if status == Run.Status.INCOMPLETE:
        reason = _INCOMPLETE_REASONS.get((error or {}).get("code", ""), "max_output_tokens")
        ended["incomplete_details"] = {"reason": reason}
    return ended


def usage_object(usage: dict[str, Any] | None) -> dict[str, Any] | None:
    """A run's usage (the upstream's chat-completion counts, summed over its model calls)
    in OpenAI's Responses shape; None before any model call reported usage."""
    if not usage:
        return None
    input_tokens = int(usage.get("prompt_tokens", 0))
    output_tokens = int(usage.get("completion_tokens", 0))
    return {
        "input_tokens": input_tokens,
        "input_tokens_details": {
            "cached_tokens": _detail(usage, "prompt_tokens_details", "cached_tokens"),
            # OpenAI's SDK requires it beside the specification's `cached_tokens`.
            "cache_write_tokens": _detail(usage, "prompt_tokens_details", "cache_write_tokens"),
        },
        "output_tokens": output_tokens,
        "output_tokens_details": {
            "reasoning_tokens": _detail(usage, "completion_tokens_details", "reasoning_tokens")
        },
        "total_tokens": int(usage.get("total_tokens", input_tokens + output_tokens)),
    }


def _detail(usage: dict[str, Any], group: str, name: str) -> int:
    """A count the upstream broke out (cached prompt tokens, reasoning tokens), 0 when it
    said nothing of it."""
    details = usage.get(group)
    value = details.get(name) if isinstance(details, dict) else None
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return 0


def _run_messages(run: Run) -> list[Message]:
    return list(Message.objects.filter(run=run).order_by("seq"))


def _rows(messages: list[Message]) -> list[dict[str, Any]]:
    return [selectors.message_row(message) for message in messages]


def response_object(run: Run) -> dict[str, Any]:
    """The response as it stands, from the run's row and the messages it stored."""
    trigger_seq = _trigger_seq(run)
    produced = [m for m in _run_messages(run) if m.seq > trigger_seq]
    output = [item.body for row in _rows(produced) for item in message_items(row)]
    # A reply stopped before it said anything leaves an empty turn: nothing to show.
    output = [item for item in output if not _empty_message(item)]
    return {**response_ending(response_head(run), run_payload(run)), "output": output}


def input_items(run: Run) -> list[dict[str, Any]]:
    """The items the response's request stored (its input), oldest first."""
    trigger_seq = _trigger_seq(run)
    taken = [m for m in _run_messages(run) if m.seq <= trigger_seq]
    return [item.body for row in rows_with_files(_rows(taken)) for item in message_items(row)]


def _trigger_seq(run: Run) -> int:
    trigger = run.trigger_message
    return trigger.seq if trigger is not None else 0


def _empty_message(item: dict[str, Any]) -> bool:
    return item["type"] == "message" and not item["content"][0]["text"]
