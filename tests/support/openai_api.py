"""Calling /openai/v1/ in tests: its address in this process, an API key to call it with,
the error object of an answer as the SDK parsed it, and a stream's events."""

import json
from collections.abc import Iterable
from typing import Any

import openai

from accounts import services as account_services
from accounts.models import User

BASE = "http://testserver/openai/v1"


def key_for(user: User) -> str:
    _, secret = account_services.api_key_create(owner=user, name="openai sdk")
    return secret


def body_of(error: openai.APIStatusError) -> dict[str, Any]:
    """The `error` object of an answer, as the SDK parsed it."""
    assert isinstance(error.body, dict), error.body
    return error.body


DONE = "data: [DONE]"


def sse_events(lines: Iterable[str]) -> list[dict[str, Any]]:
    """The JSON events of a stream's lines. A stream that ended says `data: [DONE]` last,
    after its terminal event, and nothing follows it."""
    data = [line for line in lines if line.startswith("data: ")]
    if DONE in data:
        assert data.index(DONE) == len(data) - 1, "events after data: [DONE]"
        data = data[:-1]
    return [json.loads(line.removeprefix("data: ")) for line in data]
