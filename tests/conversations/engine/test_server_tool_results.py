"""What a tool server's call leaves behind, against real MCP servers: a stop ends a call
in flight within moments (its result says it was cancelled, the run ends cancelled), and
the images a tool returns become the owner's files on its stored result, named in the
text the model reads (a run kept nowhere keeps only the text)."""

import threading
import time
from typing import Any

import pytest

from accounts.models import User
from conversations import engine, services
from conversations.engine import eventlog, stateless
from conversations.models import Attachment, Message, Run, StoredFile
from conversations.tools import servers as server_tools
from conversations.tools.mcp_client import McpFailure
from tests.support.fake_openai import FakeOpenAI, Script
from tests.support.mcp_servers import PIXEL, server_register
from tests.support.steps import run_to_end, steps_in_threads
from tests.support.waiting import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

PICTURE_TEXT = "a pixel\n[image: kit-picture-1.png]"


def model_calls(upstream: FakeOpenAI, *calls: tuple[str, str, str]) -> None:
    """A model that asks for `calls` until it has their results, then says "Done."."""

    def respond(body: dict[str, Any]) -> Script:
        answered = any(m.get("role") == "tool" for m in body.get("messages", []))
        return Script(text="Done.") if answered else Script(tool_calls=list(calls))

    upstream.respond_with(respond)


def started(owner: User, tools: list[str]) -> Run:
    conversation = services.conversation_create(owner=owner, title="Tools", tools=tools)
    return engine.run_start(conversation=conversation, content="Go")[1]


def results(run: Run) -> list[tuple[str, bool]]:
    rows = Message.objects.filter(run=run, role="tool").order_by("seq")
    return [(m.content, bool((m.provider_payload or {}).get("is_error"))) for m in rows]


class CallSpy:
    """`mcp_tool_call` as the servers' tools make it, noting when a call is under way and
    how it ended."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.sent = threading.Event()
        self.ended: list[str] = []
        real = server_tools.mcp_tool_call

        def spy(**kwargs: Any) -> Any:
            self.sent.set()
            try:
                return real(**kwargs)
            except McpFailure as failure:
                self.ended.append(failure.kind)
                raise

        monkeypatch.setattr(server_tools, "mcp_tool_call", spy)


def test_a_stop_ends_a_call_in_flight_and_the_run_within_moments(
    owner, redis_url, upstream, mcp_servers, monkeypatch
):
    # A minute of patience: only the stop can end this call soon.
    server_register("slow", mcp_servers["hangs"], timeout_seconds=60)
    model_calls(upstream, ("call_wait", "slow__wait", "{}"))
    spy = CallSpy(monkeypatch)
    steps_in_threads(monkeypatch)
    run = started(owner, ["slow__wait"])
    assert spy.sent.wait(20), "the call was never sent"

    stopped_at = time.monotonic()
    engine.run_cancel(run=run)
    wait_until(lambda: not Run.objects.get(pk=run.pk).is_active, timeout=10, what="the run to end")

    assert time.monotonic() - stopped_at < 4
    run.refresh_from_db()
    assert run.status == "cancelled"
    assert results(run) == [("slow__wait was cancelled: the run was stopped while it ran.", True)]
    # The call itself was cancelled (its connection closed), and the model not asked again.
    wait_until(lambda: spy.ended, timeout=5, what="the call to end")
    assert spy.ended == ["cancelled"]
    assert len(upstream.requests) == 1
    types = [event["type"] for event in eventlog.events_all(str(run.pk))]
    assert types[-2:] == [eventlog.TOOL_RESULT_COMPLETED, "run.cancelled"]


def test_a_call_that_writes_says_its_effect_may_still_take_place(
    owner, redis_url, upstream, mcp_servers, monkeypatch
):
    server_register("slow", mcp_servers["hangs"], timeout_seconds=60)
    # Its list unread, a tool is taken for one that writes.
    monkeypatch.setattr(
        server_tools, "server_tools_for", lambda **_: server_tools.ServerListing(status="error")
    )
    model_calls(upstream, ("call_wait", "slow__wait", "{}"))
    spy = CallSpy(monkeypatch)
    steps_in_threads(monkeypatch)
    run = started(owner, ["slow__wait"])
    assert spy.sent.wait(20), "the call was never sent"

    engine.run_cancel(run=run)
    wait_until(lambda: not Run.objects.get(pk=run.pk).is_active, timeout=10, what="the run to end")

    [(text, is_error)] = results(run)
    assert is_error
    assert text.endswith("stopped while it ran. Its effect may still take place.")


def tool_files(message: Message) -> list[StoredFile]:
    rows = Attachment.objects.filter(message=message).order_by("position").select_related("file")
    return [row.file for row in rows]


def test_images_a_tool_returns_become_the_owners_files_on_its_result(
    owner, redis_url, enqueued, upstream, mcp_servers
):
    server_register("kit", mcp_servers["varied"])
    model_calls(upstream, ("call_pic", "kit__picture", "{}"))

    run = run_to_end(started(owner, ["kit__picture"]), enqueued)

    tool = Message.objects.get(run=run, role="tool")
    assert (tool.content, run.status) == (PICTURE_TEXT, "completed")
    [file] = tool_files(tool)
    assert (file.owner, file.filename, file.content_type) == (
        owner,
        "kit-picture-1.png",
        "image/png",
    )
    with services.files_storage().open(file.storage_name) as stored:
        assert stored.read() == PIXEL
    # The model reads the text naming the image (a tool message takes text only).
    told = [m for m in upstream.requests[-1].messages if m["role"] == "tool"]
    assert told == [{"role": "tool", "tool_call_id": "call_pic", "content": PICTURE_TEXT}]
    [event] = [
        e for e in eventlog.events_all(str(run.pk)) if e["type"] == eventlog.TOOL_RESULT_COMPLETED
    ]
    assert event["attachments"] == [
        {
            "id": str(file.pk),
            "filename": "kit-picture-1.png",
            "content_type": "image/png",
            "size": len(PIXEL),
        }
    ]


def test_an_image_past_the_quota_is_named_and_not_kept(
    owner, redis_url, enqueued, upstream, mcp_servers, settings
):
    settings.PARLEY_FILE_QUOTA_BYTES = 10
    server_register("kit", mcp_servers["varied"])
    model_calls(upstream, ("call_pic", "kit__picture", "{}"))

    run = run_to_end(started(owner, ["kit__picture"]), enqueued)

    tool = Message.objects.get(run=run, role="tool")
    assert tool.content.startswith(f"{PICTURE_TEXT}\n[image kit-picture-1.png not kept: ")
    assert "storage limit" in tool.content
    assert (tool_files(tool), StoredFile.objects.count(), run.status) == ([], 0, "completed")


def test_a_run_kept_nowhere_keeps_only_the_text_naming_the_image(
    owner, redis_url, upstream, mcp_servers
):
    server_register("kit", mcp_servers["varied"])
    model_calls(upstream, ("call_pic", "kit__picture", "{}"))

    chat = stateless.stateless_chat(
        user=owner,
        state=None,
        system="",
        messages=[{"role": "user", "content": "Draw"}],
        tools=["kit__picture"],
    )

    told = [m["content"] for m in upstream.requests[-1].messages if m["role"] == "tool"]
    assert (chat.status, told) == ("completed", [PICTURE_TEXT])
    assert not StoredFile.objects.exists()
