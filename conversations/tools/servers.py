"""Tool servers' tools as the model and the API see them (MCP over streamable HTTP,
through tools/mcp_client.py).

A server's tool list is read from the server and cached per server for
PARLEY_TOOL_SERVER_LIST_SECONDS; the key names the server's last change, so an admin's
edit reads it afresh, and setting or clearing a credential calls `server_tools_forget`.
The last list read is kept for a day besides: while a server is down its tools are still
offered, and their calls fail with a tool error the model reads. A `per_user` server's
list is read with the asking user's token when they have one, else with another user's:
a user without a credential is offered its tools, and their call gets the credential
error.

Each tool reaches the model as `<server>__<tool>` with the server's input schema (a tool
whose name or schema a model would refuse is left out), the server's allow-list applied.
`ServerTools`, the registry's source of them (added when the app is ready), makes each a
registry `Tool` whose call carries the calling user's own credential only, so
`tool_execute` runs it like a built-in: the same argument checks, time limit, output cut
and metrics.
"""

import logging
import re
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import pydantic
from django.conf import settings
from django.core.cache import cache

from accounts.secrets import SecretUnreadable, secret_decrypt
from conversations.models import ToolCredential, ToolServer, ToolServerAuth
from conversations.models.tool_servers import TOOL_SEPARATOR
from conversations.selectors.tool_servers import (
    tool_credential_token,
    tool_server_secret,
    tool_servers_open,
)
from conversations.tools.mcp_client import (
    Endpoint,
    McpFailure,
    mcp_result_text,
    mcp_result_with_images,
    mcp_tool_call,
    mcp_tools_list,
)
from conversations.tools.registry import Tool, ToolContext, ToolError, ToolImage, ToolOutput

if TYPE_CHECKING:
    from accounts.models import User

logger = logging.getLogger(__name__)

Status = Literal["ok", "unreachable", "credential_missing", "credential_refused", "error"]

# A list is read while someone waits (a page, a model call): never longer than this.
LIST_TIMEOUT_SECONDS = 10
LAST_LIST_SECONDS = 24 * 3600
# A call's own deadline lies this far beyond the server's time limit: `tool_execute`
# stops waiting first, then the call is cancelled and its connection closed.
CALL_CLEANUP_SECONDS = 1.0
# Other users' tokens tried for a `per_user` server's list when one is refused.
LIST_TOKENS_TRIED = 3
# What model APIs accept as a function's name.
_FUNCTION_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
_STATUS_OF: dict[str, Status] = {
    "unreachable": "unreachable",
    "timeout": "unreachable",
    "refused": "credential_refused",
    "error": "error",
    "invalid": "error",
    "cancelled": "error",
}
# The images a result may carry that are kept as files (others are only named).
_IMAGE_SUFFIXES = {
    "image/png": "png",
    "image/jpeg": "jpg",
    "image/gif": "gif",
    "image/webp": "webp",
}


def credential_message(server_name: str) -> str:
    return f"credential missing or refused: set your token for {server_name}"


@dataclass(frozen=True)
class ServerTool:
    # The server's own name of the tool (the model sees `<server>__<name>`).
    name: str
    description: str
    parameters: dict[str, Any] = field(default_factory=dict)
    # The server's annotations: read-only or idempotent calls may be sent again after a
    # crash cut one short.
    read_only: bool = False
    idempotent: bool = False


@dataclass(frozen=True)
class ServerListing:
    # "ok", or why the list could not be read ("unreachable", "credential_missing",
    # "credential_refused", "error").
    status: Status
    tools: list[ServerTool] = field(default_factory=list)


def server_tools_for(*, server: ToolServer, user: "User") -> ServerListing:
    """The server's tools (its allow-list applied) as `user` may use them: read from the
    server (cached for a short while), never raising."""
    try:
        status, tools = _listing(server, user)
        if server.auth == ToolServerAuth.PER_USER and not _has_credential(server, user):
            status = "credential_missing"
    except Exception:
        logger.exception("tool server %s: its tools could not be listed", server.name)
        return ServerListing(status="error")
    allowed = set(server.allowed_tools or [])
    if allowed:
        tools = [tool for tool in tools if tool.name in allowed]
    return ServerListing(status=status, tools=tools)


def server_tools_forget(*, server: ToolServer) -> None:
    """Read the server's tool list afresh next time (a credential set or cleared)."""
    try:
        cache.delete(_key(server, "fresh"))
    except Exception:
        logger.warning("tool server %s: its cached tool list could not be dropped", server.name)


# --- the list, cached ----------------------------------------------------------------


def _key(server: ToolServer, part: str) -> str:
    changed = server.updated_at.timestamp() if server.updated_at else 0
    return f"tool-servers:{server.pk}:{changed}:{part}"


def _listing(server: ToolServer, user: "User") -> tuple[Status, list[ServerTool]]:
    fresh = _cache_get(_key(server, "fresh"))
    if fresh is not None:
        return fresh["status"], [ServerTool(**tool) for tool in fresh["tools"]]
    status, tools = _read(server, user)
    if status == "ok":
        _cache_set(_key(server, "last"), [asdict(tool) for tool in tools], LAST_LIST_SECONDS)
    else:
        last = _cache_get(_key(server, "last")) or []
        tools = [ServerTool(**tool) for tool in last]
    value = {"status": status, "tools": [asdict(tool) for tool in tools]}
    _cache_set(_key(server, "fresh"), value, settings.PARLEY_TOOL_SERVER_LIST_SECONDS)
    return status, tools


def _cache_get(key: str) -> Any:
    try:
        return cache.get(key)
    except Exception:
        logger.warning("the tool list cache could not be read", exc_info=True)
        return None


def _cache_set(key: str, value: Any, seconds: int) -> None:
    try:
        cache.set(key, value, timeout=seconds)
    except Exception:
        logger.warning("the tool list cache could not be written", exc_info=True)


def _read(server: ToolServer, user: "User") -> tuple[Status, list[ServerTool]]:
    tokens = _listing_tokens(server, user)
    if tokens is None:
        return "error", []
    status: Status = "credential_missing" if tokens == [""] else "credential_refused"
    timeout = min(server.timeout_seconds, LIST_TIMEOUT_SECONDS)
    for token in tokens:
        try:
            listed = mcp_tools_list(endpoint=Endpoint(server.url, timeout, token))
        except McpFailure as failure:
            logger.warning(
                "tool server %s: its tools could not be listed: %s", server.name, failure
            )
            if failure.kind == "refused" and server.auth == ToolServerAuth.PER_USER:
                continue  # another user's token may still read the list
            return _STATUS_OF[failure.kind], []
        return "ok", _usable_tools(server, listed)
    return status, []


def _listing_tokens(server: ToolServer, user: "User") -> list[str] | None:
    """The tokens to read the list with, in order ("" for none); None when the server's
    secret cannot be read."""
    if server.auth == ToolServerAuth.SHARED:
        try:
            return [tool_server_secret(server=server) or ""]
        except SecretUnreadable:
            logger.warning("tool server %s: no configured key opens its secret", server.name)
            return None
    if server.auth != ToolServerAuth.PER_USER:
        return [""]
    tokens = []
    own = _readable_token(server, user)
    if own:
        tokens.append(own)
    others = (
        ToolCredential.objects.filter(server=server)
        .exclude(user=user)
        .order_by("-updated_at")
        .values_list("token_encrypted", flat=True)[:LIST_TOKENS_TRIED]
    )
    for stored in others:
        try:
            tokens.append(secret_decrypt(stored))
        except SecretUnreadable:
            continue
    return tokens or [""]


def _readable_token(server: ToolServer, user: "User") -> str | None:
    try:
        return tool_credential_token(server=server, user=user)
    except SecretUnreadable:
        logger.warning(
            "tool server %s: no configured key opens user %s's token", server.name, user.pk
        )
        return None


def _has_credential(server: ToolServer, user: "User") -> bool:
    return ToolCredential.objects.filter(server=server, user=user).exists()


def _usable_tools(server: ToolServer, listed: list[Any]) -> list[ServerTool]:
    """The listed tools a model can be offered: a name that fits a function's, an input
    schema that is a JSON object's."""
    usable = []
    for tool in listed:
        full = f"{server.name}{TOOL_SEPARATOR}{tool.name}"
        schema = tool.input_schema
        if not _FUNCTION_NAME.fullmatch(full) or not _object_schema(schema):
            logger.warning(
                "tool server %s: tool %r left out (its name or schema)", server.name, tool.name
            )
            continue
        annotations = tool.annotations
        usable.append(
            ServerTool(
                name=tool.name,
                description=tool.description or tool.title or tool.name,
                parameters=schema,
                read_only=bool(annotations and annotations.read_only_hint),
                idempotent=bool(annotations and annotations.idempotent_hint),
            )
        )
    return usable


def _object_schema(schema: Any) -> bool:
    return isinstance(schema, dict) and schema.get("type") == "object"


# --- as registry tools -----------------------------------------------------------------


class ServerArguments(pydantic.BaseModel):
    """Any JSON object: the server checks the arguments against its own schema."""

    model_config = pydantic.ConfigDict(extra="allow")


def _entry(server: ToolServer, tool: ServerTool) -> Tool:
    def call(context: ToolContext, **arguments: Any) -> ToolOutput:
        return _call(server, tool.name, context, arguments)

    return Tool(
        name=f"{server.name}{TOOL_SEPARATOR}{tool.name}",
        description=tool.description,
        function=call,
        arguments=ServerArguments,
        parameters=tool.parameters,
        timeout=float(server.timeout_seconds),
        mutating=not tool.read_only,
        resendable=tool.read_only or tool.idempotent,
        server=server.name,
        source=f"tool server {server.name}",
    )


def _call(
    server: ToolServer, name: str, context: ToolContext, arguments: dict[str, Any]
) -> ToolOutput:
    """One call with the calling user's own credential (or the shared secret)."""
    token = _call_token(server, context.user)
    endpoint = Endpoint(server.url, server.timeout_seconds + CALL_CLEANUP_SECONDS, token)
    try:
        result = mcp_tool_call(endpoint=endpoint, name=name, arguments=arguments, stop=context.stop)
    except McpFailure as failure:
        if failure.kind == "refused":
            raise ToolError(_refusal(server)) from None
        raise ToolError(f"tool server {server.name}: {failure}") from None
    if result.is_error:
        raise ToolError(mcp_result_text(result) or "the tool reported an error")
    text, images = mcp_result_with_images(result, prefix=f"{server.name}-{name}")
    return ToolOutput(text, tuple(ToolImage(image.filename, image.data) for image in images))


def _call_token(server: ToolServer, user: "User") -> str:
    if server.auth == ToolServerAuth.PER_USER:
        token = _readable_token(server, user)
        if not token:
            raise ToolError(credential_message(server.name))
        return token
    if server.auth == ToolServerAuth.SHARED:
        try:
            return tool_server_secret(server=server) or ""
        except SecretUnreadable:
            raise ToolError(
                f"tool server {server.name}: its secret cannot be read; an admin must set it again"
            ) from None
    return ""


def _refusal(server: ToolServer) -> str:
    if server.auth == ToolServerAuth.PER_USER:
        return credential_message(server.name)
    return f"tool server {server.name} refused the call; an admin must check its credential"


class ServerTools:
    """The registry's source of tool servers' tools (`<server>__<tool>`)."""

    def claims(self, name: str) -> bool:
        return TOOL_SEPARATOR in name

    def tools_for(self, *, user: "User") -> list[Tool]:
        return self._entries(user, servers=None)

    def tools_named(self, *, names: list[str], user: "User") -> list[Tool]:
        wanted = {name.partition(TOOL_SEPARATOR)[0] for name in names}
        found = {entry.name: entry for entry in self._entries(user, servers=wanted)}
        return [found[name] for name in dict.fromkeys(names) if name in found]

    def tool_called(self, *, name: str, user: "User") -> Tool | None:
        found = self.tools_named(names=[name], user=user)
        if found:
            return found[0]
        server_name, _, tool_name = name.partition(TOOL_SEPARATOR)
        server = _open_server(user, server_name)
        if server is None or not tool_name:
            return None
        listing = server_tools_for(server=server, user=user)
        if listing.tools or listing.status == "ok":
            return None  # its list says there is no such tool
        # The list cannot be read (a token refused, the server down): the call itself
        # says why, as nothing is known of the tool, it is taken as one that writes.
        unknown = ServerTool(name=tool_name, description="", parameters={"type": "object"})
        return _entry(server, unknown)

    def _entries(self, user: "User", *, servers: set[str] | None) -> list[Tool]:
        """The tools of the servers open to `user` (of those named); none when they cannot
        be read (a tool call must still get its error result)."""
        if user.pk is None:
            return []
        try:
            open_servers = tool_servers_open(user=user)
            if servers is not None:
                open_servers = open_servers.filter(name__in=servers)
            return [
                _entry(server, tool)
                for server in open_servers
                for tool in server_tools_for(server=server, user=user).tools
            ]
        except Exception:
            logger.exception("the tool servers open to user %s could not be read", user.pk)
            return []

    def name_problem(self, *, name: str, user: "User | None") -> str | None:
        server_name, _, tool_name = name.partition(TOOL_SEPARATOR)
        if not server_name or not tool_name:
            return f"unknown tool {name!r}"
        if user is None:
            return None  # checked when it is offered to the model and when it is called
        server = _open_server(user, server_name)
        if server is None:
            return f"unknown tool {name!r}: no tool server {server_name!r} is open to you"
        listing = server_tools_for(server=server, user=user)
        if any(tool.name == tool_name for tool in listing.tools):
            return None
        if not listing.tools and listing.status != "ok":
            return None  # its list cannot be read now: a call will tell
        known = ", ".join(f"{server_name}{TOOL_SEPARATOR}{t.name}" for t in listing.tools)
        return f"unknown tool {name!r}; tool server {server_name!r} offers: {known or 'none'}"


def _open_server(user: "User", name: str) -> ToolServer | None:
    if user.pk is None:
        return None
    try:
        return tool_servers_open(user=user).filter(name=name).first()
    except Exception:
        logger.exception("the tool servers open to user %s could not be read", user.pk)
        return None
