"""`POST stateless/chat/`: state in, state out, nothing stored server-side."""

import base64
import zlib
from collections.abc import AsyncGenerator
from typing import Any

import pytest
from django.core import signing

from accounts.models import User
from conversations.engine import stateless
from conversations.engine.llm.base import Finished, StreamEvent, TextDelta
from conversations.models import Conversation, Message
from tests.support.api import error_of

pytestmark = pytest.mark.django_db
URL = "/api/v1/stateless/chat/"


class EchoProvider:
    name = "echo"

    def __init__(self) -> None:
        self.calls: list[list[dict[str, Any]]] = []

    async def stream(
        self,
        *,
        model: str,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        generation: Any = None,
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


def owner_id() -> int:
    return User.objects.get(username="alice").pk


def history(state: str, provider_name: str = "echo") -> list[tuple[str, str]]:
    decoded = stateless.state_decode(state, provider=provider_name, user_id=owner_id()).messages
    return [(m["role"], m["content"]) for m in decoded]


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


def _raw_encrypted(payload: bytes) -> str:
    return stateless._cipher().encrypt(zlib.compress(payload)).decode()


GOOD = [{"role": "user", "content": "old"}, {"role": "assistant", "content": "older"}]


def _states() -> dict[str, str]:
    forged = stateless.state_encode(provider="echo", user_id=owner_id(), messages=GOOD)
    tampered = base64.urlsafe_b64decode(forged)
    tampered = tampered[:-40] + bytes([tampered[-40] ^ 1]) + tampered[-39:]
    old_format = signing.Signer(salt=stateless.SALT).sign(
        "eJyrVkrOzy0oSi0uTk1RslJQKs7PTVWqBQBUXwek"
    )
    return {
        "invalid_signature": base64.urlsafe_b64encode(tampered).decode(),
        "invalid_json": _raw_encrypted(b"{not json"),
        "unsupported_version": stateless.state_pack(
            {"version": 1, "provider": "echo", "user": owner_id(), "messages": GOOD}
        ),
        "provider_mismatch": stateless.state_encode(
            provider="another", user_id=owner_id(), messages=GOOD
        ),
        "corrupted_messages": stateless.state_pack(
            {
                "version": stateless.STATE_VERSION,
                "provider": "echo",
                "user": owner_id(),
                "messages": [{"role": "tool", "content": "42", "tool_call_id": "nobody"}],
            }
        ),
        "wrong_user": stateless.state_encode(
            provider="echo", user_id=owner_id() + 1, messages=GOOD
        ),
        "too_large": stateless.state_encode(
            provider="echo",
            user_id=owner_id(),
            messages=[{"role": "user", "content": "x" * 100}] * 5000,
        ),
        "version-1 format": old_format,
        "deep json": _raw_encrypted(("[" * 100_000 + "]" * 100_000).encode()),
        # The rule every stored path keeps: a call is answered once.
        "answered twice": stateless.state_encode(
            provider="echo",
            user_id=owner_id(),
            messages=[
                {"role": "user", "content": "old"},
                {
                    "role": "assistant",
                    "content": "",
                    "tool_calls": [{"id": "c1", "name": "calculator", "arguments": "{}"}],
                },
                {"role": "tool", "content": "1", "tool_call_id": "c1"},
                {"role": "tool", "content": "1 again", "tool_call_id": "c1"},
            ],
        ),
    }


EXPECTED = {
    "version-1 format": "unsupported_version",
    "deep json": "invalid_json",
    "answered twice": "corrupted_messages",
}


@pytest.mark.parametrize(
    "case",
    sorted(
        [
            "invalid_signature",
            "invalid_json",
            "unsupported_version",
            "provider_mismatch",
            "corrupted_messages",
            "wrong_user",
            "too_large",
            "version-1 format",
            "deep json",
            "answered twice",
        ]
    ),
)
def test_bad_state_starts_fresh_and_says_why(api, provider, case, caplog):
    response = api.post(
        URL, {"state": _states()[case], "messages": [{"role": "user", "content": "Hi"}]}
    )
    assert response.status_code == 200
    body = response.json()
    reason = EXPECTED.get(case, case)
    assert body["state_reset"]["reason"] == reason
    assert body["state_reset"]["message"]
    assert sent(provider) == [("user", "Hi")]
    assert history(body["state"]) == [("user", "Hi"), ("assistant", "reply 1")]
    # One warning line with the reason and the caller, never the content.
    lines = [r for r in caplog.records if r.name == "conversations.engine.stateless"]
    assert [r.levelname for r in lines] == ["WARNING"]
    assert reason in lines[0].getMessage()
    assert str(owner_id()) in lines[0].getMessage()
    assert "old" not in lines[0].getMessage()


def test_a_state_past_its_maximum_age_is_expired(api, provider, settings, monkeypatch):
    state = stateless.state_encode(provider="echo", user_id=owner_id(), messages=GOOD)
    settings.PARLEY_STATELESS_STATE_MAX_AGE_SECONDS = 60
    real_time = stateless.time.time
    monkeypatch.setattr(stateless.time, "time", lambda: real_time() + 61)
    body = api.post(URL, {"state": state, "messages": [{"role": "user", "content": "Hi"}]})
    assert body.json()["state_reset"]["reason"] == "expired"


def test_another_users_state_is_not_accepted(api, provider, as_user, outsider):
    first = api.post(URL, {"messages": [{"role": "user", "content": "my secret plan"}]}).json()
    stolen = as_user(outsider).post(
        URL, {"state": first["state"], "messages": [{"role": "user", "content": "go on"}]}
    )
    assert stolen.json()["state_reset"]["reason"] == "wrong_user"
    assert all("secret plan" not in content for _, content in sent(provider))


def test_the_state_is_opaque(api, provider):
    body = api.post(URL, {"messages": [{"role": "user", "content": "the launch code 1234"}]})
    state = body.json()["state"]
    raw = base64.urlsafe_b64decode(state + "=" * (-len(state) % 4))
    assert b"launch" not in raw
    # Not merely compressed: no tail of it inflates to the text.
    for offset in range(len(raw)):
        try:
            inflated = zlib.decompress(raw[offset:])
        except zlib.error:
            continue
        assert b"launch" not in inflated


def test_a_state_that_inflates_past_the_limit_is_too_large(api, provider, settings):
    # 16 MB of history in a few kilobytes: refused while inflating, never held whole.
    bomb = b'{"version":2,"provider":"echo","user":1,"messages":[{"role":"user","content":"'
    bomb += b"a" * (16 * 1024 * 1024) + b'"}]}'
    state = stateless._cipher().encrypt(zlib.compress(bomb, 9)).decode()
    assert len(state) < 100_000
    body = api.post(URL, {"state": state, "messages": [{"role": "user", "content": "x"}]})
    assert body.json()["state_reset"]["reason"] == "too_large"


def test_states_issued_before_a_key_rotation_still_open(api, provider, settings):
    first = api.post(URL, {"messages": [{"role": "user", "content": "Hello"}]}).json()
    settings.SECRET_KEY_FALLBACKS = [settings.SECRET_KEY]
    settings.SECRET_KEY = "a-brand-new-secret-key-" + "x" * 40
    again = api.post(
        URL, {"state": first["state"], "messages": [{"role": "user", "content": "More"}]}
    )
    assert "state_reset" not in again.json()
    settings.SECRET_KEY_FALLBACKS = []
    gone = api.post(URL, {"state": first["state"], "messages": [{"role": "user", "content": "x"}]})
    assert gone.json()["state_reset"]["reason"] == "invalid_signature"


def test_garbage_and_another_servers_state_are_refused_as_invalid_signature(
    api, provider, settings
):
    states = ["not a state", "gAAAAA" + "A" * 80, "\u00e9t\u00e9"]
    own_key = settings.SECRET_KEY
    settings.SECRET_KEY = "another-server-" + "y" * 50
    states.append(stateless.state_encode(provider="echo", user_id=owner_id(), messages=GOOD))
    settings.SECRET_KEY = own_key
    for state in states:
        body = api.post(URL, {"state": state, "messages": [{"role": "user", "content": "x"}]})
        assert body.json()["state_reset"]["reason"] == "invalid_signature", state


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


# --- context events without a model call ----------------------------------------------


def test_only_system_messages_after_a_history_are_events_kept_without_a_model_call(api, provider):
    first = api.post(URL, {"messages": [{"role": "user", "content": "Hello"}]}).json()
    calls = len(provider.calls)

    answer = api.post(
        URL,
        {
            "state": first["state"],
            "messages": [
                {"role": "system", "content": "The user switched to French."},
                {"role": "system", "content": "It is now evening."},
            ],
        },
    )
    assert answer.status_code == 200
    body = answer.json()
    assert body["reply"] is None
    assert len(provider.calls) == calls  # no model call
    assert history(body["state"]) == [
        ("user", "Hello"),
        ("assistant", "reply 1"),
        ("system", "The user switched to French."),
        ("system", "It is now evening."),
    ]

    # The next turn sends them to the model in their place.
    api.post(URL, {"state": body["state"], "messages": [{"role": "user", "content": "Hi"}]})
    assert sent(provider)[-3:] == [
        ("system", "The user switched to French."),
        ("system", "It is now evening."),
        ("user", "Hi"),
    ]


def test_only_system_messages_with_no_history_are_refused_clearly(api, provider):
    answer = api.post(URL, {"messages": [{"role": "system", "content": "Be brief."}]})
    assert answer.status_code == 400
    problem = error_of(answer)
    assert "preamble" in str(problem)
    assert provider.calls == []


def test_inflating_stops_exactly_at_the_limit(settings):
    settings.PARLEY_STATELESS_STATE_MAX_BYTES = 1000
    exact = zlib.compress(b"x" * 1000)
    assert stateless._inflate(exact) == b"x" * 1000
    with pytest.raises(stateless.StateRejected) as rejected:
        stateless._inflate(zlib.compress(b"x" * 1001))
    assert rejected.value.reason == "too_large"
    # A stream cut short gives what it holds (the JSON reader then refuses it), never hangs.
    cut = stateless._inflate(zlib.compress(b"y" * 900)[:-6])
    assert set(cut) <= {ord("y")}
    assert len(cut) <= 900


def test_the_daily_message_quota_holds_though_nothing_is_stored(api, provider, settings):
    settings.PARLEY_MAX_MESSAGES_PER_DAY = 1
    first = api.post(URL, {"messages": [{"role": "user", "content": "Hello"}]}, format="json")
    assert first.status_code == 200
    again = {"state": first.json()["state"], "messages": [{"role": "user", "content": "More"}]}
    refused = api.post(URL, again, format="json")
    assert refused.status_code == 429
    assert error_of(refused)["code"] == "message_quota_exceeded"
    assert len(provider.calls) == 1  # the model was not asked again


def test_the_tools_asked_for_must_be_ones_the_caller_may_use(api, provider):
    say = [{"role": "user", "content": "Hi"}]

    chosen = api.post(URL, {"messages": say, "tools": ["calculator"]}, format="json")
    closed = api.post(URL, {"messages": say, "tools": ["lab__lookup"]}, format="json")

    assert chosen.status_code == 200
    assert closed.status_code == 400
    problem = error_of(closed)["details"]["problems"][0]
    assert problem["path"] == "$.tools[0]"
    assert "no tool server 'lab' is open to you" in problem["message"]
    assert len(provider.calls) == 1
