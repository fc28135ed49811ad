"""Tool servers' tools in the one loop, against real MCP servers: each user's call
carries their own token only, every failure is a tool error the model reads and the run
ends normally, stateless chat and `store: false` call them too, and a call a crash may
have cut short is sent again only when the tool says that is safe."""

import json
import logging
import time
from typing import Any

import pytest
from prometheus_client import REGISTRY

from accounts.models import User
from conversations import engine, services
from conversations.engine import eventlog, stateless
from conversations.engine.responses import ResponseAsk, response_unstored
from conversations.models import Message, Run, ToolServer
from conversations.services import NewMessage
from conversations.tools.mcp_client import Endpoint, mcp_result_text, mcp_tool_call
from tests.support.fake_openai import FakeOpenAI, Script
from tests.support.mcp_servers import McpServerProcess, server_register
from tests.support.steps import run_to_end, step_run, steps_in_threads
from tests.support.waiting import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

CREDENTIAL = "credential missing or refused: set your token for people"


def model_calls(upstream: FakeOpenAI, *calls: tuple[str, str, str]) -> None:
    """A model that asks for `calls` until it has their results, then says "Done."."""

    def respond(body: dict[str, Any]) -> Script:
        answered = any(m.get("role") == "tool" for m in body.get("messages", []))
        return Script(text="Done.") if answered else Script(tool_calls=list(calls))

    upstream.respond_with(respond)


def per_user(mcp_servers: dict[str, McpServerProcess], **tokens: str) -> ToolServer:
    """The token server as `people`, each named user holding the token given."""
    server = server_register("people", mcp_servers["tokens"], auth="per_user")
    for username, token in tokens.items():
        user = User.objects.get(username=username)
        services.tool_credential_set(server=server, user=user, token=token)
    return server


def started(owner: User, tools: list[str], content: str = "Go") -> Run:
    conversation = services.conversation_create(owner=owner, title="Tools", tools=tools)
    return engine.run_start(conversation=conversation, content=content)[1]


def results(run: Run) -> list[tuple[str, bool]]:
    """The run's tool results as stored: (text, is_error)."""
    rows = Message.objects.filter(run=run, role="tool").order_by("seq")
    return [(m.content, bool((m.provider_payload or {}).get("is_error"))) for m in rows]


def test_two_users_each_get_their_own_result_in_the_same_second(
    owner, outsider, redis_url, upstream, mcp_servers, monkeypatch
):
    per_user(mcp_servers, alice="token-of-alice", mallory="token-of-mallory")
    model_calls(upstream, ("call_who", "people__whoami", '{"delay": 1}'))
    steps_in_threads(monkeypatch)

    runs = [started(user, ["people__whoami"]) for user in (owner, outsider)]
    wait_until(
        lambda: all(not Run.objects.get(pk=run.pk).is_active for run in runs),
        what="both runs to end",
    )

    assert [results(run) for run in runs] == [
        [("token=token-of-alice", False)],
        [("token=token-of-mallory", False)],
    ]
    # Each call takes a second on the server: results kept less than a second apart
    # come from calls that ran side by side (one after the other, they would be a second
    # apart at least, however busy the host).
    first, second = (Message.objects.get(run=run, role="tool").created_at for run in runs)
    assert abs((second - first).total_seconds()) < 1
    assert all(Run.objects.get(pk=run.pk).status == "completed" for run in runs)


@pytest.mark.parametrize(
    "token", [None, "expired-token-of-alice", "bad-token-of-alice"], ids=["none", "401", "403"]
)
def test_a_missing_or_refused_credential_is_a_tool_error_the_model_reads(
    owner, outsider, redis_url, enqueued, upstream, mcp_servers, token
):
    # Mallory's token reads the server's list: Alice is offered its tools all the same.
    tokens = {"mallory": "token-of-mallory", **({"alice": token} if token else {})}
    per_user(mcp_servers, **tokens)
    model_calls(upstream, ("call_who", "people__whoami", "{}"))

    run = run_to_end(started(owner, ["people__whoami"]), enqueued)

    assert run.status == "completed"
    assert results(run) == [(f"people__whoami failed: {CREDENTIAL}", True)]
    told = [m for m in upstream.requests[-1].messages if m["role"] == "tool"]
    assert told[0]["content"] == f"people__whoami failed: {CREDENTIAL}"


def test_a_call_to_a_server_whose_list_cannot_be_read_says_why(
    owner, redis_url, enqueued, upstream, mcp_servers
):
    per_user(mcp_servers, alice="expired-token-of-alice")
    model_calls(upstream, ("call_who", "people__whoami", "{}"))
    conversation = services.conversation_create(owner=owner, tools=["people__whoami"])

    run = run_to_end(engine.run_start(conversation=conversation, content="Go")[1], enqueued)

    # Nobody's token reads its list, so the model is not offered the tool; a call to it
    # (a model may still make one up) is sent, and the server's refusal told.
    assert upstream.requests[0].body.get("tools") is None
    assert results(run) == [(f"people__whoami failed: {CREDENTIAL}", True)]


def test_a_hung_server_times_out_and_the_run_goes_on(
    owner, redis_url, enqueued, upstream, mcp_servers
):
    server_register("slow", mcp_servers["hangs"], timeout_seconds=1)
    model_calls(upstream, ("call_wait", "slow__wait", "{}"))
    begun = time.monotonic()

    run = run_to_end(started(owner, ["slow__wait"]), enqueued)

    assert run.status == "completed"
    [(text, is_error)] = results(run)
    assert is_error
    assert text.startswith("slow__wait timed out: it did not finish within 1 seconds")
    assert time.monotonic() - begun < 6


def test_a_server_that_dies_mid_call_is_a_tool_error(
    owner, redis_url, enqueued, upstream, dying_mcp_server
):
    server_register("fragile", dying_mcp_server)
    model_calls(upstream, ("call_crash", "fragile__crash", "{}"))

    first = run_to_end(started(owner, ["fragile__crash"]), enqueued)
    again = run_to_end(started(owner, ["fragile__crash"]), enqueued)

    assert (first.status, again.status) == ("completed", "completed")
    for run in (first, again):
        [(text, is_error)] = results(run)
        assert is_error
        assert text.startswith("fragile__crash failed: tool server fragile:")
        assert "could not be reached" in text or "closed the connection" in text


def test_results_are_cut_to_the_tool_output_limit_and_errors_kept_as_such(
    owner, redis_url, enqueued, upstream, mcp_servers, settings
):
    settings.PARLEY_TOOL_OUTPUT_MAX_CHARS = 500
    server_register("kit", mcp_servers["varied"])
    model_calls(
        upstream,
        ("call_huge", "kit__huge", '{"size": 100000}'),
        ("call_fails", "kit__fails", "{}"),
        ("call_struct", "kit__structured", '{"n": 4}'),
    )

    run = run_to_end(started(owner, ["kit__huge", "kit__fails", "kit__structured"]), enqueued)

    huge, fails, structured = results(run)
    assert len(huge[0]) <= 500
    assert "truncated" in huge[0]
    assert not huge[1]
    assert fails == ("kit__fails failed: Error executing tool fails: the warehouse is closed", True)
    assert structured == ('{"n":4,"square":16}', False)


def test_the_model_is_offered_the_allowed_tools_with_the_servers_schema(
    owner, redis_url, enqueued, upstream, mcp_servers
):
    server_register("kit", mcp_servers["varied"], allowed_tools=["structured"])
    upstream.push(Script(text="Nothing to do."))

    run_to_end(started(owner, ["calculator", "kit__structured"]), enqueued)

    offered = {t["function"]["name"]: t["function"] for t in upstream.requests[0].body["tools"]}
    assert sorted(offered) == ["calculator", "kit__structured"]
    assert offered["kit__structured"]["parameters"]["required"] == ["n"]


def test_stateless_chat_and_a_response_kept_nowhere_call_server_tools(
    owner, redis_url, upstream, mcp_servers
):
    per_user(mcp_servers, alice="token-of-alice")
    model_calls(upstream, ("call_who", "people__whoami", "{}"))
    conversation = services.conversation_create(owner=owner, tools=["people__whoami"])

    chat = stateless.stateless_chat(
        user=owner,
        state=None,
        system="",
        messages=[{"role": "user", "content": "Who am I?"}],
        tools=["people__whoami"],
    )
    told = [m["content"] for m in upstream.requests[-1].messages if m["role"] == "tool"]
    ask = ResponseAsk(messages=[NewMessage(role="user", content="Who am I?")])
    response, events = response_unstored(user=owner, ask=ask, conversation=conversation)

    assert (chat.status, chat.reply, told) == ("completed", "Done.", ["token=token-of-alice"])
    outputs = [e["output"] for e in events if e["type"] == eventlog.TOOL_RESULT_COMPLETED]
    assert (response.status, outputs) == ("completed", ["token=token-of-alice"])


def crashed_after_the_model_step(run: Run, enqueued: list[str]) -> None:
    """The model step, then the tool step's attempt counted as one that died."""
    enqueued.clear()
    step_run(str(run.pk))
    Run.objects.filter(pk=run.pk).update(attempt=1)  # the next lease makes it attempt 2


@pytest.mark.parametrize(
    ("tool", "first_result"),
    [
        ("record", ("kit__record failed: interrupted: the call may or may not have run", True)),
        ("lookup", ("looked up {note}", False)),
    ],
    ids=["not-idempotent", "idempotent"],
)
def test_a_resumed_call_is_sent_again_only_when_the_tool_says_it_is_safe(
    owner, redis_url, enqueued, upstream, mcp_servers, tool, first_result
):
    note = f"resumed-{tool}"
    server_register("kit", mcp_servers["varied"])
    model_calls(
        upstream,
        ("call_1", f"kit__{tool}", json.dumps({"note": note})),
        ("call_2", "kit__record", json.dumps({"note": f"{note}-after"})),
    )
    run = started(owner, list(dict.fromkeys([f"kit__{tool}", "kit__record"])))

    crashed_after_the_model_step(run, enqueued)
    run = run_to_end(run, enqueued)

    text, is_error = first_result
    # Only the first call still pending can have been under way; the next one runs.
    assert results(run) == [
        (text.format(note=note), is_error),
        (f"noted {note}-after", False),
    ]
    recorded = mcp_tool_call(
        endpoint=Endpoint(mcp_servers["varied"].url, 10), name="recorded", arguments={}
    )
    notes = mcp_result_text(recorded).splitlines()
    assert (note in notes) == (tool == "lookup")
    assert run.status == "completed"


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def test_calls_are_counted_per_server(owner, redis_url, enqueued, upstream, mcp_servers):
    server_register("kit", mcp_servers["varied"])
    model_calls(upstream, ("c1", "kit__fails", "{}"), ("c2", "kit__structured", '{"n": 1}'))

    def counts() -> tuple[float, float, float]:
        return (
            sample("parley_tool_server_calls_total", server="kit", outcome="ok"),
            sample("parley_tool_server_errors_total", server="kit"),
            sample("parley_tool_server_call_seconds_count", server="kit"),
        )

    counted = counts()
    run_to_end(started(owner, ["kit__fails", "kit__structured"]), enqueued)

    ok, errors, timed = (after - earlier for after, earlier in zip(counts(), counted, strict=True))
    assert (ok, errors, timed) == (1, 1, 2)


def test_secrets_appear_in_no_log_line_event_or_stored_message(
    owner, outsider, redis_url, enqueued, upstream, mcp_servers, caplog
):
    caplog.set_level(logging.DEBUG)
    secrets = ["token-of-alice-Zr8Wp4", "expired-token-of-mallory-Hj5N", "shared-Qx7Lm2Vb9"]
    per_user(mcp_servers, alice=secrets[0], mallory=secrets[1])
    server_register("team", mcp_servers["tokens"], auth="shared", secret=secrets[2])
    model_calls(upstream, ("c1", "people__hello", "{}"), ("c2", "team__hello", "{}"))
    tools = ["people__hello", "team__hello"]

    runs = [run_to_end(started(user, tools), enqueued) for user in (owner, outsider)]

    events = json.dumps([eventlog.events_all(str(run.pk)) for run in runs])
    stored = json.dumps([[m.content for m in Message.objects.filter(run=run)] for run in runs])
    assert [results(run) for run in runs] == [
        [("hello", False), ("hello", False)],
        [(f"people__hello failed: {CREDENTIAL}", True), ("hello", False)],
    ]
    for secret in secrets:
        assert secret not in caplog.text
        assert secret not in events
        assert secret not in stored
