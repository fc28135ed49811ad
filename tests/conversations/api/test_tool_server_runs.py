"""A tool server's tool through every door, against a real MCP server, as a program uses
it: a user sets their own token over `/api/v1`, enables the tool on a conversation, sends
a message and the run calls the tool with that token; the same conversation answers a
`/openai/v1/responses` request with its server tool; stateless chat takes the tool by
name; a user without a token reads the credential error, and never another's result."""

from typing import Any

import pytest
from rest_framework.test import APIClient

from accounts.models import User
from conversations.models import Run, ToolServer
from tests.support.api import error_of
from tests.support.fake_openai import FakeOpenAI, Script
from tests.support.mcp_servers import McpServerProcess, server_register
from tests.support.steps import steps_in_threads
from tests.support.waiting import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

ALICE_TOKEN = "token-of-alice-Rk2"
CREDENTIAL_ERROR = "people__whoami failed: credential missing or refused: set your token for people"


@pytest.fixture
def people(mcp_servers: dict[str, McpServerProcess]) -> ToolServer:
    return server_register("people", mcp_servers["tokens"], auth="per_user")


@pytest.fixture
def worker(monkeypatch: pytest.MonkeyPatch, redis_url: str, upstream: FakeOpenAI) -> FakeOpenAI:
    """Steps run in threads of this process, as a worker takes them; the fake upstream
    asks for `people__whoami` until it has a result, then says what it read."""

    def respond(body: dict[str, Any]) -> Script:
        results = [m["content"] for m in body.get("messages", []) if m.get("role") == "tool"]
        if results:
            return Script(text=f"The tool said: {results[-1]}")
        return Script(tool_calls=[("call_who", "people__whoami", "{}")])

    upstream.respond_with(respond)
    steps_in_threads(monkeypatch)
    return upstream


def token_set(client: APIClient, server: ToolServer, token: str) -> None:
    answer = client.put(
        f"/api/v1/tool-servers/{server.pk}/credential/", {"token": token}, format="json"
    )
    assert answer.status_code == 200, answer.content
    assert answer.json() == {"credential_set": True}


def conversation_with_tool(client: APIClient) -> str:
    created = client.post("/api/v1/conversations/", {"tools": ["people__whoami"]}, format="json")
    assert created.status_code == 201, created.content
    return str(created.json()["id"])


def asked(client: APIClient, conversation_id: str, content: str) -> dict[str, Any]:
    """The message sent, and its run followed to its end: the run as the API reads it."""
    sent = client.post(
        f"/api/v1/conversations/{conversation_id}/messages/", {"content": content}, format="json"
    )
    assert sent.status_code == 202, sent.content
    run_id = sent.json()["run"]["id"]
    wait_until(lambda: not Run.objects.get(pk=run_id).is_active, what="the run to end")
    return dict(client.get(f"/api/v1/runs/{run_id}/").json())


def tool_messages(client: APIClient, conversation_id: str) -> list[tuple[str, str, bool]]:
    page = client.get(f"/api/v1/conversations/{conversation_id}/messages/").json()
    return [
        (m["name"], m["content"], bool((m["provider_payload"] or {}).get("is_error")))
        for m in page["results"]
        if m["role"] == "tool"
    ]


def test_over_api_v1_a_users_own_token_reaches_the_tool_and_the_model(
    api, outsider_api, people, worker
):
    token_set(api, people, ALICE_TOKEN)
    mine = conversation_with_tool(api)
    theirs = conversation_with_tool(outsider_api)

    run = asked(api, mine, "Who am I?")
    other = asked(outsider_api, theirs, "Who am I?")

    assert (run["status"], other["status"]) == ("completed", "completed")
    assert tool_messages(api, mine) == [("people__whoami", f"token={ALICE_TOKEN}", False)]
    assert tool_messages(outsider_api, theirs) == [("people__whoami", CREDENTIAL_ERROR, True)]
    replies = [
        m.messages[-1]["content"] for m in worker.requests if m.messages[-1]["role"] == "tool"
    ]
    assert replies == [f"token={ALICE_TOKEN}", CREDENTIAL_ERROR]
    # Another user's conversation and credential are not theirs to reach.
    assert outsider_api.get(f"/api/v1/conversations/{mine}/messages/").status_code == 404
    listed = outsider_api.get("/api/v1/tool-servers/").json()["results"]
    assert [(s["name"], s["credential_set"]) for s in listed] == [("people", False)]


def test_over_openai_v1_a_response_in_the_conversation_calls_its_server_tool(
    api, sdk, owner: User, people, worker
):
    token_set(api, people, ALICE_TOKEN)
    conversation_id = conversation_with_tool(api)
    client = sdk(owner)

    # The conversation made over /api/v1, named by its own id.
    response = client.responses.create(model="m", input="Who am I?", conversation=conversation_id)

    assert response.status == "completed"
    assert [item.type for item in response.output] == [
        "function_call",
        "function_call_output",
        "message",
    ]
    call, result = response.output[0], response.output[1]
    assert (call.name, result.output) == ("people__whoami", f"token={ALICE_TOKEN}")
    assert response.output_text == f"The tool said: token={ALICE_TOKEN}"
    assert tool_messages(api, conversation_id) == [
        ("people__whoami", f"token={ALICE_TOKEN}", False)
    ]


def test_stateless_chat_takes_the_server_tool_by_name(api, outsider_api, people, worker):
    token_set(api, people, ALICE_TOKEN)
    say = {"messages": [{"role": "user", "content": "Who am I?"}], "tools": ["people__whoami"]}

    mine = api.post("/api/v1/stateless/chat/", say, format="json")
    theirs = outsider_api.post("/api/v1/stateless/chat/", say, format="json")

    assert mine.status_code == theirs.status_code == 200
    assert mine.json()["reply"] == f"The tool said: token={ALICE_TOKEN}"
    assert theirs.json()["reply"] == f"The tool said: {CREDENTIAL_ERROR}"
    # A tool of a server the user may not use is refused before anything runs.
    refused = api.post(
        "/api/v1/stateless/chat/", {**say, "tools": ["elsewhere__whoami"]}, format="json"
    )
    assert refused.status_code == 400
    assert error_of(refused)["details"]["problems"][0]["path"] == "$.tools[0]"
