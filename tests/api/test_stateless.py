"""`POST stateless/chat/` (seed 000): state in, state out, nothing stored server-side."""

import base64
import zlib
from collections.abc import AsyncGenerator
from typing import Any

import pytest
from django.core import signing

from conversations import stateless
from conversations.llm.base import Finished, StreamEvent, TextDelta
from conversations.models import Conversation, Message
from tests.api.conftest import error_of

pytestmark = pytest.mark.django_db
URL = "/api/v1/stateless/chat/"


class EchoProvider:
    name = "echo"

    def __init__(self) -> None:
        self.calls: list[list[dict[str, Any]]] = []

    async def stream(
        self, *, model: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]]
    ) -> AsyncGenerator[StreamEvent, None]:
        self.calls.append(messages)
        yield TextDelta(f"reply {len(self.calls)}")
        yield Finished("stop")


@pytest.fixture
def provider(monkeypatch) -> EchoProvider:
    echo = EchoProvider()
    monkeypatch.setattr(stateless, "provider_get", lambda: echo)
    return echo


def sent(provider: EchoProvider, call: int = -1) -> list[tuple[str, str]]:
    return [(m["role"], m["content"]) for m in provider.calls[call]]


def history(state: str, provider_name: str = "echo") -> list[tuple[str, str]]:
    return [
        (m["role"], m["content"]) for m in stateless.state_decode(state, provider=provider_name)
    ]


def test_the_leading_system_message_is_sent_every_call_but_never_kept(api, provider):
    first = api.post(
        URL,
        {"system": "You are terse.", "messages": [{"role": "user", "content": "Hello"}]},
    ).json()
    assert first["reply"] == "reply 1"
    assert "state_reset" not in first
    assert sent(provider) == [("system", "You are terse."), ("user", "Hello")]
    assert history(first["state"]) == [("user", "Hello"), ("assistant", "reply 1")]

    second = api.post(
        URL,
        {
            "state": first["state"],
            "messages": [
                {"role": "system", "content": "You are verbose now."},
                {"role": "user", "content": "Again"},
            ],
        },
    ).json()
    assert sent(provider) == [
        ("system", "You are verbose now."),
        ("user", "Hello"),
        ("assistant", "reply 1"),
        ("user", "Again"),
    ]
    assert history(second["state"]) == [
        ("user", "Hello"),
        ("assistant", "reply 1"),
        ("user", "Again"),
        ("assistant", "reply 2"),
    ]


def test_a_system_message_after_the_first_message_is_kept_in_order(api, provider):
    answer = api.post(
        URL,
        {
            "messages": [
                {"role": "system", "content": "Preamble"},
                {"role": "user", "content": "I'm going out."},
                {"role": "system", "content": "User checked in at the theatre."},
                {"role": "user", "content": "Tell me about this place."},
            ]
        },
    ).json()
    assert sent(provider)[0] == ("system", "Preamble")
    assert history(answer["state"]) == [
        ("user", "I'm going out."),
        ("system", "User checked in at the theatre."),
        ("user", "Tell me about this place."),
        ("assistant", "reply 1"),
    ]
    api.post(URL, {"state": answer["state"], "messages": [{"role": "user", "content": "And?"}]})
    assert ("system", "User checked in at the theatre.") in sent(provider)
    assert ("system", "Preamble") not in sent(provider)


def _raw_signed(payload: bytes) -> str:
    packed = base64.urlsafe_b64encode(zlib.compress(payload)).decode().rstrip("=")
    return signing.Signer(salt=stateless.SALT).sign(packed)


def _states() -> dict[str, str]:
    good = [{"role": "user", "content": "old"}, {"role": "assistant", "content": "older"}]
    forged = stateless.state_encode(provider="echo", messages=good)
    value, _, signature = forged.rpartition(":")
    return {
        "invalid_signature": value + ":" + signature[::-1],
        "invalid_json": _raw_signed(b"{not json"),
        "unsupported_version": stateless.state_pack(
            {"version": 2, "provider": "echo", "messages": good}
        ),
        "provider_mismatch": stateless.state_encode(provider="another", messages=good),
        "corrupted_messages": stateless.state_pack(
            {
                "version": 1,
                "provider": "echo",
                "messages": [{"role": "tool", "content": "42", "tool_call_id": "nobody"}],
            }
        ),
    }


@pytest.mark.parametrize("reason", sorted(_states()))
def test_bad_state_starts_fresh_and_says_why(api, provider, reason):
    response = api.post(
        URL, {"state": _states()[reason], "messages": [{"role": "user", "content": "Hi"}]}
    )
    assert response.status_code == 200
    body = response.json()
    assert body["state_reset"]["reason"] == reason
    assert body["state_reset"]["message"]
    assert sent(provider) == [("user", "Hi")]
    assert history(body["state"]) == [("user", "Hi"), ("assistant", "reply 1")]


def test_garbage_and_a_foreign_key_signature_are_refused_as_invalid_signature(api, provider):
    for state in ["not a state", "a:b:c", stateless.state_encode(provider="echo", messages=[])]:
        if state.count(":") == 1:
            # The same content signed by another server (another SECRET_KEY): a forgery.
            value = state.rpartition(":")[0]
            state = signing.Signer(key="another secret", salt=stateless.SALT).sign(value)
        body = api.post(URL, {"state": state, "messages": [{"role": "user", "content": "x"}]})
        assert body.json()["state_reset"]["reason"] == "invalid_signature"


def test_tools_run_and_their_results_travel_in_the_signed_state(api, settings):
    settings.PARLEY_DEMO_TOKENS_PER_SECOND = 0
    body = api.post(URL, {"messages": [{"role": "user", "content": "What is 12*7?"}]}).json()
    assert "84" in body["reply"]
    roles = [role for role, _ in history(body["state"], "demo")]
    assert roles == ["user", "assistant", "tool", "assistant"]


def test_nothing_is_stored(api, provider):
    api.post(URL, {"messages": [{"role": "user", "content": "Hi"}]})
    assert not Conversation.objects.exists()
    assert not Message.objects.exists()


@pytest.mark.parametrize(
    "body",
    [
        {"messages": []},
        {"messages": [{"role": "system", "content": "only a preamble"}]},
        {"messages": [{"role": "tool", "content": "forged result"}]},
        {"messages": "Hi"},
    ],
)
def test_invalid_requests_are_400(api, provider, body):
    response = api.post(URL, body)
    assert response.status_code == 400
    assert error_of(response)["details"]["problems"][0]["path"].startswith("$.messages")
    assert provider.calls == []


def test_an_over_long_message_is_400(api, provider, settings):
    settings.PARLEY_MAX_MESSAGE_CHARS = 5
    response = api.post(URL, {"messages": [{"role": "user", "content": "too long"}]})
    assert response.status_code == 400
    assert error_of(response)["details"]["problems"][0]["path"] == "$.messages[0].content"
