"""Tool servers' tools as users see them: listed from real MCP servers and cached per
server, the allow-list applied, offered (and accepted in a conversation's `tools`) only
to users the server is open to, as `<server>__<tool>` with the server's schema."""

import pytest
from django.contrib.auth.models import Group

from accounts.models import User
from conversations import services
from conversations.errors import ValidationFailed
from conversations.tools import tool_catalog, tool_definitions, tool_names_problems
from conversations.tools.servers import server_tools_for, server_tools_forget
from tests.support.mcp_servers import server_register

pytestmark = pytest.mark.django_db

VARIED_TOOLS = ["huge", "structured", "fails", "picture", "record", "lookup", "recorded"]


def member(user: User, group: str) -> User:
    user.groups.add(Group.objects.get_or_create(name=group)[0])
    return user


def names(listing) -> list[str]:
    return [tool.name for tool in listing.tools]


def test_a_servers_tools_are_listed_with_their_schemas_and_annotations(owner, mcp_servers):
    server = server_register("kit", mcp_servers["varied"])

    listing = server_tools_for(server=server, user=owner)

    # `two words` is left out: no model API takes it as a function's name.
    assert (listing.status, names(listing)) == ("ok", VARIED_TOOLS)
    tools = {tool.name: tool for tool in listing.tools}
    assert tools["structured"].parameters["properties"]["n"]["type"] == "integer"
    assert (tools["record"].read_only, tools["record"].idempotent) == (False, False)
    assert (tools["lookup"].read_only, tools["lookup"].idempotent) == (False, True)
    assert tools["recorded"].read_only


def test_the_allow_list_keeps_only_the_tools_it_names(owner, mcp_servers):
    server = server_register("kit", mcp_servers["varied"], allowed_tools=["huge", "fails"])

    assert names(server_tools_for(server=server, user=owner)) == ["huge", "fails"]
    assert [t["name"] for t in tool_catalog(user=owner) if t["server"]] == [
        "kit__huge",
        "kit__fails",
    ]


def test_the_list_is_cached_and_the_last_one_outlives_a_server_gone_down(owner, dying_mcp_server):
    server = server_register("fragile", dying_mcp_server)
    first = server_tools_for(server=server, user=owner)
    dying_mcp_server.stop()

    cached = server_tools_for(server=server, user=owner)
    server_tools_forget(server=server)
    afresh = server_tools_for(server=server, user=owner)

    assert (first.status, names(first)) == ("ok", ["crash"])
    assert (cached.status, names(cached)) == ("ok", ["crash"])
    # Read again, the server is down: its tools are still offered, their calls will fail.
    assert (afresh.status, names(afresh)) == ("unreachable", ["crash"])


def test_a_per_user_servers_list_is_read_with_some_users_token(owner, outsider, mcp_servers):
    server = server_register("people", mcp_servers["tokens"], auth="per_user")
    nobody_yet = server_tools_for(server=server, user=owner)

    services.tool_credential_set(server=server, user=outsider, token="token-of-mallory")
    server_tools_forget(server=server)
    without = server_tools_for(server=server, user=owner)
    holding = server_tools_for(server=server, user=outsider)

    assert (nobody_yet.status, names(nobody_yet)) == ("credential_missing", [])
    # Offered to a user without a credential too: their call gets the credential error.
    assert (without.status, names(without)) == ("credential_missing", ["whoami", "hello"])
    assert (holding.status, names(holding)) == ("ok", ["whoami", "hello"])


def test_a_refused_shared_secret_lists_nothing(owner, mcp_servers):
    server = server_register("stale", mcp_servers["tokens"], auth="shared", secret="bad-secret")

    listing = server_tools_for(server=server, user=owner)

    assert (listing.status, listing.tools) == ("credential_refused", [])


def test_only_users_a_server_is_open_to_are_offered_its_tools(owner, outsider, mcp_servers):
    server_register("kit", mcp_servers["varied"], groups=["lab"])
    server_register("off", mcp_servers["varied"], enabled=False)
    member(owner, "lab")

    offered = {t["name"]: t for t in tool_catalog(user=owner)}
    definitions = tool_definitions(["kit__structured", "calculator", "off__huge"], user=owner)

    assert offered["kit__structured"]["server"] == "kit"
    assert offered["calculator"]["server"] is None
    assert not any(name.startswith("off__") for name in offered)
    assert not any(t["server"] for t in tool_catalog(user=outsider))
    assert [d["function"]["name"] for d in definitions] == ["calculator", "kit__structured"]
    schema = definitions[1]["function"]["parameters"]
    assert schema["type"] == "object"
    assert schema["required"] == ["n"]
    assert tool_definitions(["kit__structured"], user=outsider) == []


def test_a_conversation_enables_only_server_tools_open_to_its_owner(owner, outsider, mcp_servers):
    server_register("kit", mcp_servers["varied"], groups=["lab"])
    member(owner, "lab")
    mine = services.conversation_create(owner=owner, tools=["calculator", "kit__huge"])
    theirs = services.conversation_create(owner=outsider)

    with pytest.raises(ValidationFailed) as refused:
        services.conversation_update(conversation=theirs, tools=["kit__huge"])

    assert mine.tools == ["calculator", "kit__huge"]
    assert "no tool server 'kit' is open to you" in str(refused.value.problems)
    unknown = tool_names_problems(["kit__nope", "kit__huge", "kit__huge"], user=owner)
    assert [p.path for p in unknown] == ["$.tools[0]", "$.tools[2]"]
    assert "tool server 'kit' offers: kit__huge" in unknown[0].message
    # An imported document is checked for the form only: no user to ask for.
    assert tool_names_problems(["kit__nope"]) == []


def test_the_tools_endpoint_lists_each_users_own_servers_tools(
    owner, outsider, mcp_servers, as_user
):
    server_register("kit", mcp_servers["varied"], groups=["lab"], allowed_tools=["huge"])
    member(owner, "lab")

    mine = as_user(owner).get("/api/v1/tools/").json()["results"]
    theirs = as_user(outsider).get("/api/v1/tools/").json()["results"]

    assert [(t["name"], t["server"], t["mutating"]) for t in mine if t["server"]] == [
        ("kit__huge", "kit", True)
    ]
    assert not any(t["server"] for t in theirs)
