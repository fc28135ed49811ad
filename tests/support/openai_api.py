"""Calling /openai/v1/ in tests: its address in this process, an API key to call it with,
and the error object of an answer as the SDK parsed it."""

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
