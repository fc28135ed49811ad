"""Tool servers for tests: registered through the services, staff who may manage them,
and the servers' tool listings answered without any network (the MCP client is tested
on its own)."""

from dataclasses import dataclass, field
from typing import Any

import pytest
from django.contrib.auth.models import Group

from accounts.models import User
from conversations import services
from conversations.models import ToolServer
from conversations.tools import servers as server_tools
from conversations.tools.servers import ServerListing, ServerTool
from tests.support.admin import staff

# Plaintext secrets, distinctive enough that finding one anywhere is a leak.
SHARED_SECRET = "shared-S3cr3t-Qx7Lm2Vb9"
ALICE_TOKEN = "alice-T0k3n-Zr8Wp4Kd1"
BOB_TOKEN = "bob-T0k3n-Hj5Ns3Fq6"
MANAGER_PERMISSIONS = (
    "view_toolserver",
    "add_toolserver",
    "change_toolserver",
    "delete_toolserver",
)
LOOKUP_TOOL = ServerTool(
    name="lookup",
    description="Looks a word up.",
    parameters={"type": "object", "properties": {"word": {"type": "string"}}},
)


def server_make(
    name: str,
    *,
    auth: str = "none",
    secret: str | None = None,
    groups: list[str] | None = None,
    enabled: bool = True,
    **fields: Any,
) -> ToolServer:
    for group in groups or []:
        Group.objects.get_or_create(name=group)
    return services.tool_server_create(
        actor=None,
        name=name,
        url=f"http://{name}.internal:8080/mcp",
        auth=auth,
        secret=secret,
        groups=groups,
        enabled=enabled,
        **fields,
    )


def manager(username: str = "toolkeeper", *codenames: str) -> User:
    """Staff holding the tool server permissions (those named, else all four)."""
    return staff(username, *(codenames or MANAGER_PERMISSIONS))


def member_of(user: User, *groups: str) -> User:
    for name in groups:
        user.groups.add(Group.objects.get_or_create(name=name)[0])
    return user


@dataclass
class Listings:
    """`server_tools_for` answered from here: every server lists LOOKUP_TOOL with
    status `ok`, or what `status` names for it; each call is recorded."""

    calls: list[tuple[str, str]] = field(default_factory=list)
    status: dict[str, str] = field(default_factory=dict)

    def __call__(self, *, server: ToolServer, user: User) -> ServerListing:
        self.calls.append((server.name, user.get_username()))
        status = self.status.get(server.name, "ok")
        return ServerListing(status=status, tools=[LOOKUP_TOOL] if status == "ok" else [])  # type: ignore[arg-type]


def listings_fake(monkeypatch: pytest.MonkeyPatch) -> Listings:
    listings = Listings()
    monkeypatch.setattr(server_tools, "server_tools_for", listings)
    return listings
