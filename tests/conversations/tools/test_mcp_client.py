"""The MCP client against real MCP servers in processes of their own: lists and calls
with the bearer token given, every failure as an `McpFailure` that says why, a hung
server let go of at the deadline, results as the text the model reads."""

import base64
import threading
import time

import mcp_types
import pytest

from conversations.tools.mcp_client import (
    Endpoint,
    McpFailure,
    mcp_result_text,
    mcp_result_with_images,
    mcp_tool_call,
    mcp_tools_list,
)
from tests.support.mcp_servers import PIXEL


def test_a_list_and_a_call_carry_the_token_given(mcp_servers):
    endpoint = Endpoint(mcp_servers["tokens"].url, 10, "token-of-alice")

    tools = mcp_tools_list(endpoint=endpoint)
    result = mcp_tool_call(endpoint=endpoint, name="whoami", arguments={})

    assert [tool.name for tool in tools] == ["whoami", "hello"]
    assert tools[0].annotations is not None
    assert tools[0].annotations.read_only_hint
    assert (result.is_error, mcp_result_text(result)) == (False, "token=token-of-alice")


@pytest.mark.parametrize(
    ("token", "status"), [("", 401), ("expired-1", 401), ("bad-1", 403)], ids=["none", "401", "403"]
)
def test_a_refused_credential_is_told_apart(mcp_servers, token, status):
    with pytest.raises(McpFailure) as refused:
        mcp_tools_list(endpoint=Endpoint(mcp_servers["tokens"].url, 10, token))

    assert refused.value.kind == "refused"
    assert f"HTTP {status}" in str(refused.value)


def test_a_hung_server_is_let_go_of_at_the_deadline(mcp_servers):
    threads_before = threading.active_count()
    started = time.monotonic()

    with pytest.raises(McpFailure) as hung:
        mcp_tool_call(endpoint=Endpoint(mcp_servers["hangs"].url, 1.5), name="wait", arguments={})

    assert hung.value.kind == "timeout"
    assert 1.4 < time.monotonic() - started < 3
    # The call's loop ended with it: nothing is left running for the hung server.
    assert threading.active_count() <= threads_before


def test_a_stop_cancels_a_call_in_flight(mcp_servers):
    stop = threading.Event()
    threading.Timer(0.5, stop.set).start()
    started = time.monotonic()

    with pytest.raises(McpFailure) as stopped:
        mcp_tool_call(
            endpoint=Endpoint(mcp_servers["hangs"].url, 30), name="wait", arguments={}, stop=stop
        )

    assert (stopped.value.kind, str(stopped.value)) == ("cancelled", "the call was cancelled")
    assert time.monotonic() - started < 2


def test_a_server_that_dies_mid_call_and_one_that_is_gone_are_unreachable(dying_mcp_server):
    endpoint = Endpoint(dying_mcp_server.url, 10)

    with pytest.raises(McpFailure) as died:
        mcp_tool_call(endpoint=endpoint, name="crash", arguments={})
    dying_mcp_server.process.wait(timeout=10)
    with pytest.raises(McpFailure) as gone:
        mcp_tool_call(endpoint=endpoint, name="crash", arguments={})

    assert (died.value.kind, gone.value.kind) == ("unreachable", "unreachable")


def test_results_become_the_text_the_model_reads(mcp_servers):
    endpoint = Endpoint(mcp_servers["varied"].url, 10)

    def call(name: str, **arguments: object) -> tuple[bool, str]:
        result = mcp_tool_call(endpoint=endpoint, name=name, arguments=arguments)
        return result.is_error, mcp_result_text(result)

    assert call("structured", n=3) == (False, '{"n":3,"square":9}')
    assert call("fails") == (True, "Error executing tool fails: the warehouse is closed")
    assert call("picture") == (False, "a pixel\n[image: image/png, not shown]")
    assert call("huge", size=50_000) == (False, "x" * 50_000)
    # Arguments the server's schema refuses: an error result the model can correct.
    refused, text = call("structured", n="three")
    assert refused
    assert "validation error" in text


def test_images_of_a_kind_kept_as_files_are_named_and_given_with_their_bytes():
    png = base64.b64encode(PIXEL).decode()
    result = mcp_types.CallToolResult(
        content=[
            mcp_types.TextContent(text="two charts"),
            mcp_types.ImageContent(data=png, mime_type="image/png"),
            mcp_types.ImageContent(data="bm90IGFuIGltYWdl", mime_type="image/svg+xml"),
            mcp_types.ImageContent(data="%%%", mime_type="image/png"),
            mcp_types.ImageContent(data=png, mime_type="image/webp"),
        ]
    )

    text, images = mcp_result_with_images(result, prefix="kit-chart")

    assert text == (
        "two charts\n[image: kit-chart-1.png]\n[image: image/svg+xml, not shown]\n"
        "[image: image/png, not shown]\n[image: kit-chart-4.webp]"
    )
    assert [(image.filename, image.data) for image in images] == [
        ("kit-chart-1.png", PIXEL),
        ("kit-chart-4.webp", PIXEL),
    ]


def test_structured_content_the_text_already_says_is_not_repeated():
    said = mcp_types.CallToolResult(
        content=[mcp_types.TextContent(text='{"a": 1}')], structured_content={"a": 1}
    )
    wrapped = mcp_types.CallToolResult(
        content=[mcp_types.TextContent(text="hello")], structured_content={"result": "hello"}
    )
    more = mcp_types.CallToolResult(
        content=[mcp_types.TextContent(text="Found one.")], structured_content={"id": 7}
    )

    assert mcp_result_text(said) == '{"a": 1}'
    assert mcp_result_text(wrapped) == "hello"
    assert mcp_result_text(more) == 'Found one.\n{"id":7}'
