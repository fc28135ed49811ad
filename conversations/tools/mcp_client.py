"""Talking to a tool server: its tools listed and one called, with the official MCP SDK
over streamable HTTP.

Every list or call opens a connection of its own and closes it: a `per_user` server's
connection carries one user's token, so none is ever shared between users.

The SDK is async and its callers are plain threads (a tool runs on `tool_execute`'s
worker thread), so each operation runs on an event loop of its own in the calling thread
(or on a helper thread when this one already runs a loop), bounded by a deadline: when it
passes, the SDK's tasks are cancelled and the connection closed, so nothing is left
waiting on a hung server.

A call may be given a `threading.Event` as its stop: once set (the run was stopped), the
call is cancelled like one past its deadline, its connection closed, and `McpFailure`
says `cancelled`.

Failures are raised as `McpFailure`, whose message names what went wrong and never
quotes a credential (a server echoing the token back has it blanked out).
"""

import asyncio
import base64
import binascii
import json
import threading
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

import anyio
import httpx2
import mcp_types
import pydantic
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client

T = TypeVar("T")

FailureKind = Literal["unreachable", "refused", "timeout", "error", "invalid", "cancelled"]
# Pages of a tool list read at most: a server paging forever cannot hold a request.
MAX_LIST_PAGES = 20
# How often a call in flight looks at its stop.
STOP_POLL_SECONDS = 0.05
# The images of a result that can be kept as files (others are only named by kind).
_IMAGE_SUFFIXES = {
    "image/png": "png",
    "image/jpeg": "jpg",
    "image/gif": "gif",
    "image/webp": "webp",
}
_REFUSING = (401, 403)


class McpFailure(Exception):
    """A list or call that did not get an answer: `kind` says why (`unreachable`,
    `refused` for HTTP 401/403, `timeout`, `error` for a failure the server reported,
    `invalid` for an answer that is not MCP, `cancelled` when its stop was set)."""

    def __init__(self, kind: FailureKind, message: str) -> None:
        super().__init__(message)
        self.kind = kind


@dataclass(frozen=True)
class Endpoint:
    url: str
    # Seconds the whole operation may take, connecting included.
    timeout: float
    # Sent as `Authorization: Bearer <token>` when set; never in a repr or a message.
    token: str = field(default="", repr=False)


def mcp_tools_list(*, endpoint: Endpoint) -> list[mcp_types.Tool]:
    """The server's tools, every page of them."""

    async def work(client: Client) -> list[mcp_types.Tool]:
        tools: list[mcp_types.Tool] = []
        cursor: str | None = None
        for _ in range(MAX_LIST_PAGES):
            page = await client.list_tools(cursor=cursor)
            tools.extend(page.tools)
            cursor = page.next_cursor
            if cursor is None:
                break
        return tools

    return _run(endpoint, work)


def mcp_tool_call(
    *,
    endpoint: Endpoint,
    name: str,
    arguments: dict[str, Any],
    stop: threading.Event | None = None,
) -> mcp_types.CallToolResult:
    """One call of the server's tool `name`; its result as the server gave it (an error
    the tool reports comes back with `is_error` set, not raised). Setting `stop` cancels
    the call in flight (`McpFailure` `cancelled`)."""

    async def work(client: Client) -> mcp_types.CallToolResult:
        return await client.call_tool(name, arguments)

    return _run(endpoint, work, stop=stop)


@dataclass(frozen=True)
class ResultImage:
    filename: str
    data: bytes = field(repr=False)


def mcp_result_with_images(
    result: mcp_types.CallToolResult, *, prefix: str
) -> tuple[str, list[ResultImage]]:
    """The result's text as `mcp_result_text` words it, each image of a kind kept as a
    file named in it (`[image: <prefix>-<n>.<suffix>]`), and those images' bytes."""
    names: list[str | None] = []
    images: list[ResultImage] = []
    blocks = [block for block in result.content if isinstance(block, mcp_types.ImageContent)]
    for number, block in enumerate(blocks, start=1):
        suffix = _IMAGE_SUFFIXES.get(block.mime_type)
        try:
            data = base64.b64decode(block.data, validate=True)
        except (binascii.Error, ValueError):
            suffix = None
        if suffix is None:
            names.append(None)
            continue
        names.append(f"{prefix}-{number}.{suffix}")
        images.append(ResultImage(filename=f"{prefix}-{number}.{suffix}", data=data))
    return mcp_result_text(result, image_names=names), images


def mcp_result_text(
    result: mcp_types.CallToolResult, *, image_names: Sequence[str | None] = ()
) -> str:
    """A call's result as the text the model reads: its text blocks joined, and its
    structured content as JSON text unless the text already says it. Image blocks are
    named by `image_names` (in order) where the caller keeps them (`[image: name]`)."""
    parts: list[str] = []
    names = iter(image_names)
    for block in result.content:
        if isinstance(block, mcp_types.TextContent):
            parts.append(block.text)
        elif isinstance(block, mcp_types.EmbeddedResource):
            resource = block.resource
            if isinstance(resource, mcp_types.TextResourceContents):
                parts.append(resource.text)
            else:
                parts.append(f"[resource {resource.uri}: {resource.mime_type or 'binary'}]")
        elif isinstance(block, mcp_types.ResourceLink):
            parts.append(f"[link: {block.name} {block.uri}]")
        elif isinstance(block, mcp_types.ImageContent) and (name := next(names, None)):
            parts.append(f"[image: {name}]")
        else:
            # Images and audio are not shown to the model; it learns they were there.
            parts.append(f"[{block.type}: {block.mime_type}, not shown]")
    text = "\n".join(parts)
    structured = result.structured_content
    if structured is not None and not _says(text, structured):
        as_json = json.dumps(structured, ensure_ascii=False, separators=(",", ":"))
        text = f"{text}\n{as_json}" if text else as_json
    return text


def _says(text: str, structured: Any) -> bool:
    """Whether `text` already carries `structured` (servers often send both: the text
    block as JSON, or a lone value wrapped as {"result": ...})."""
    if structured == {"result": text}:
        return True
    try:
        return bool(json.loads(text) == structured)
    except ValueError:
        return False


# --- one operation on an event loop of its own ------------------------------------------


class _Stopped(Exception):
    """The operation's stop was set."""


async def _unless_stopped(operation: Callable[[], Awaitable[T]], stop: threading.Event) -> T:
    """`operation`, cancelled (its connection closed on the way out) once `stop` is set."""
    done: list[T] = []

    async def run(scope: anyio.CancelScope) -> None:
        done.append(await operation())
        scope.cancel()

    async def watch(scope: anyio.CancelScope) -> None:
        while not stop.is_set():
            await anyio.sleep(STOP_POLL_SECONDS)
        scope.cancel()

    async with anyio.create_task_group() as group:
        group.start_soon(run, group.cancel_scope)
        group.start_soon(watch, group.cancel_scope)
    if not done:
        raise _Stopped
    return done[0]


def _run(
    endpoint: Endpoint,
    work: Callable[[Client], Awaitable[T]],
    *,
    stop: threading.Event | None = None,
) -> T:
    statuses: list[int] = []

    async def record(response: httpx2.Response) -> None:
        statuses.append(response.status_code)

    async def operation() -> T:
        headers = {"Authorization": f"Bearer {endpoint.token}"} if endpoint.token else {}
        with anyio.fail_after(endpoint.timeout):
            async with httpx2.AsyncClient(
                headers=headers,
                timeout=httpx2.Timeout(endpoint.timeout),
                event_hooks={"response": [record]},
            ) as http:
                transport = streamable_http_client(endpoint.url, http_client=http)
                async with Client(
                    transport, read_timeout_seconds=endpoint.timeout, cache=None
                ) as client:
                    return await work(client)

    async def guarded() -> T:
        if stop is None:
            return await operation()
        return await _unless_stopped(operation, stop)

    try:
        return _on_own_loop(guarded)
    except Exception as error:
        raise _failure(error, statuses=statuses, endpoint=endpoint) from None


def _on_own_loop(operation: Callable[[], Awaitable[T]]) -> T:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return anyio.run(operation)
    # This thread runs a loop already (async code calling in): a thread of its own.
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = anyio.run(operation)
        except BaseException as exc:
            box["error"] = exc

    thread = threading.Thread(target=target, name="mcp-client", daemon=True)
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["value"]


def _leaves(error: BaseException) -> list[BaseException]:
    """The errors inside task groups' exception groups, and the error itself otherwise."""
    if isinstance(error, BaseExceptionGroup):
        return [leaf for inner in error.exceptions for leaf in _leaves(inner)]
    return [error]


def _failure(error: Exception, *, statuses: list[int], endpoint: Endpoint) -> McpFailure:
    if any(isinstance(leaf, _Stopped) for leaf in _leaves(error)):
        return McpFailure("cancelled", "the call was cancelled")
    if any(status in _REFUSING for status in statuses):
        refused = next(status for status in statuses if status in _REFUSING)
        return McpFailure("refused", f"the server refused the credential (HTTP {refused})")
    leaves = _leaves(error)
    if any(isinstance(leaf, TimeoutError | httpx2.TimeoutException) for leaf in leaves):
        return McpFailure("timeout", f"no answer within {endpoint.timeout:g} seconds")
    for leaf in leaves:
        if isinstance(leaf, httpx2.TransportError | OSError):
            detail = _blank(str(leaf), endpoint.token) or type(leaf).__name__
            return McpFailure("unreachable", f"the server could not be reached ({detail})")
        if isinstance(leaf, MCPError):
            if leaf.code == mcp_types.CONNECTION_CLOSED:
                return McpFailure("unreachable", "the server closed the connection mid-answer")
            message = _blank(leaf.error.message, endpoint.token)
            return McpFailure("error", f"the server answered with an error: {message}")
        if isinstance(leaf, pydantic.ValidationError | RuntimeError | ValueError):
            return McpFailure("invalid", "the server's answer is not a valid MCP result")
    failed = statuses and statuses[-1] >= 400
    if failed:
        return McpFailure("error", f"the server answered HTTP {statuses[-1]}")
    return McpFailure("error", f"the call failed ({type(leaves[0]).__name__})")


def _blank(text: str, token: str) -> str:
    return text.replace(token, "[credential]") if token else text
