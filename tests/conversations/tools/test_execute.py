"""tool_execute's error handling: every failure is a result, never an exception, and
every limit (time, output size) is kept."""

import threading
import time
import uuid
from typing import Any

import pytest

from accounts.models import User
from conversations.tools import ToolContext, ToolImage, ToolOutput, ToolResult, tool, tool_execute
from tests.support.conversations import refetch
from tests.support.tools import offline_context, owner_context, run


def test_unknown_tool_is_an_error_result_listing_the_available_ones():
    result = run("rm_rf", {})
    assert result.is_error
    assert "Unknown tool 'rm_rf'" in result.output
    assert "calculator" in result.output


def test_tool_not_enabled_for_the_conversation_is_refused():
    result = run("calculator", {"expression": "1+1"}, enabled=["current_time"])
    assert result.is_error
    assert "not enabled" in result.output
    assert "current_time" in result.output


@pytest.mark.parametrize("arguments", ['{"expression": ', "not json", "{'expression': '1'}"])
def test_invalid_json_arguments(arguments):
    result = run("calculator", arguments)
    assert result.is_error
    assert result.output.startswith("Invalid JSON in the arguments for calculator")


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ("[" * 100_000 + "]" * 100_000, "deeper than"),
        ('{"expression": ' + "[" * 65 + "]" * 65 + "}", "deeper than"),
        ('{"expression": NaN}', "NaN is not a JSON number"),
        ('{"expression": 1e400}', "too large"),
        ('{"expression": 123456789012345678901234567890}', "outside 64 bits"),
    ],
)
def test_arguments_no_client_could_send_are_an_error_result_not_a_crash(arguments, message):
    # A model's arguments get the same bounds as a client's JSON: a tool call never
    # raises out of the run, and the model reads what was wrong.
    result = run("calculator", arguments)
    assert result.is_error
    assert result.output.startswith("Invalid JSON in the arguments for calculator")
    assert message in result.output


@pytest.mark.django_db
def test_unstorable_text_in_arguments_reaches_the_tool_repaired(conversation):
    # JSON escapes are valid text in the call, but decode to a lone surrogate and a NUL.
    arguments = '{"draft": "a\\ud800b\\u0000c"}'
    result = run("update_draft", arguments, context=owner_context(conversation))

    assert result == ToolResult(output="Draft updated (5 characters).", is_error=False)
    assert refetch(conversation).draft == "a\ufffdb\ufffdc"


def test_arguments_must_be_an_object():
    result = run("calculator", "[1, 2]")
    assert result.is_error
    assert "must be a JSON object, not an array" in result.output


def test_empty_arguments_mean_no_arguments():
    assert not run("current_time", "").is_error


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ({}, "expression: Field required"),
        ({"expression": 12}, "expression: Input should be a valid string"),
        ({"expression": "1", "extra": 1}, "extra: Extra inputs are not permitted"),
    ],
)
def test_validation_errors_are_readable(arguments, expected):
    result = run("calculator", arguments)
    assert result.is_error
    assert result.output.startswith("Invalid arguments for calculator: ")
    assert expected in result.output


def test_lax_validation_coerces_numbers(registry):
    @tool
    def add(context: ToolContext, a: int, b: float) -> float:
        return a + b

    result = run("add", {"a": "2", "b": 1}, enabled=["add"])
    assert result == ToolResult(output="3.0", is_error=False)


def test_a_raising_tool_reports_the_exception_without_a_traceback(registry):
    @tool
    def boom(context: ToolContext) -> str:
        raise ValueError("the flux capacitor is empty")

    result = run("boom", {}, enabled=["boom"])
    assert result == ToolResult(
        output="boom failed: ValueError: the flux capacitor is empty", is_error=True
    )
    assert "Traceback" not in result.output


def test_a_tool_exceeding_its_time_limit_is_abandoned(registry):
    release = threading.Event()

    @tool(timeout=0.05)
    def slow(context: ToolContext) -> str:
        release.wait(5)
        return "too late"

    started = time.monotonic()
    result = run("slow", {}, enabled=["slow"])
    elapsed = time.monotonic() - started
    release.set()  # let the abandoned thread finish
    assert result.is_error
    assert "slow timed out" in result.output
    assert "0.05 seconds" in result.output
    assert elapsed < 2


def test_events_of_an_abandoned_tool_are_dropped(registry):
    seen: list[str] = []
    release, done = threading.Event(), threading.Event()

    @tool(timeout=0.05)
    def late(context: ToolContext) -> str:
        context.emit("early", {})
        release.wait(5)
        context.emit("late", {})
        done.set()
        return "too late"

    result = run(
        "late", {}, context=offline_context(emit=lambda t, p: seen.append(t)), enabled=["late"]
    )
    release.set()
    assert done.wait(5)
    assert result.is_error
    assert seen == ["early"]


def test_a_slow_tool_is_kept_alive_and_a_failing_keepalive_stops_the_wait(registry):
    """The runner renews its lease while a tool runs; once that fails (the run has another
    owner) the step stops waiting at once and publishes none of the tool's events."""
    seen: list[str] = []
    beats: list[float] = []
    release = threading.Event()

    @tool(timeout=5)
    def slow(context: ToolContext) -> str:
        context.emit("working", {})
        release.wait(5)
        return "done"

    def keepalive() -> None:
        beats.append(time.monotonic())
        if len(beats) == 3:
            raise RuntimeError("the lease is gone")

    started = time.monotonic()
    with pytest.raises(RuntimeError, match="the lease is gone"):
        tool_execute(
            name="slow",
            arguments="{}",
            context=offline_context(emit=lambda t, p: seen.append(t)),
            enabled=["slow"],
            keepalive=keepalive,
            keepalive_every=0.05,
        )
    release.set()
    assert len(beats) == 3
    assert time.monotonic() - started < 2  # not the tool's 5 s limit
    assert seen == []


def test_a_stop_while_a_tool_runs_ends_the_wait_and_tells_the_tool(registry):
    """A run stopped mid-call: the tool's `stop` is set (a server's call closes its
    connection), its events so far still go out, and the result says it was cancelled."""
    seen: list[str] = []
    told = threading.Event()
    asked: list[float] = []

    @tool(timeout=30, mutating=True)
    def patient(context: ToolContext) -> str:
        context.emit("working", {})
        if context.stop.wait(10):
            told.set()
        return "too late"

    def stopped() -> bool:
        asked.append(time.monotonic())
        return len(asked) >= 3

    started = time.monotonic()
    result = tool_execute(
        name="patient",
        arguments="{}",
        context=offline_context(emit=lambda t, p: seen.append(t)),
        enabled=["patient"],
        stopped=stopped,
        stop_every=0.05,
    )

    assert time.monotonic() - started < 2  # not the tool's 30 s limit
    assert told.is_set()
    assert (result.is_error, result.cancelled) == (True, True)
    assert result.output == (
        "patient was cancelled: the run was stopped while it ran. Its effect may still take place."
    )
    assert seen == ["working"]


def test_a_tool_that_returns_images_gives_them_with_its_text(registry):
    picture = ToolImage(filename="chart-1.png", data=b"\x89PNG...")

    @tool
    def chart(context: ToolContext) -> ToolOutput:
        return ToolOutput(text="a chart\n[image: chart-1.png]", images=(picture,))

    result = run("chart", {}, enabled=["chart"])

    assert result == ToolResult(
        output="a chart\n[image: chart-1.png]", is_error=False, images=(picture,)
    )


def test_the_default_time_limit_comes_from_settings(registry, settings):
    settings.PARLEY_TOOL_TIMEOUT_SECONDS = 0.05
    release = threading.Event()

    @tool(mutating=True)
    def sluggish(context: ToolContext) -> str:
        release.wait(5)
        return "too late"

    result = run("sluggish", {}, enabled=["sluggish"])
    release.set()
    assert result.is_error
    assert "within 0.05 seconds" in result.output
    assert "may still take place" in result.output


def test_long_output_is_truncated_with_a_marker(registry, settings):
    settings.PARLEY_TOOL_OUTPUT_MAX_CHARS = 100

    @tool
    def chatty(context: ToolContext) -> str:
        return "x" * 1000

    result = run("chatty", {}, enabled=["chatty"])
    assert not result.is_error
    assert len(result.output) <= 100
    kept = result.output.count("x")
    assert f"[truncated: {1000 - kept} characters cut]" in result.output


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ({"a": 1, "b": "é"}, '{"a":1,"b":"é"}'),
        ([1, 2.5, None, True], "[1,2.5,null,true]"),
        (42, "42"),
        (None, "null"),
        (uuid.UUID(int=1), '"00000000-0000-0000-0000-000000000001"'),
        ("plain text stays as it is", "plain text stays as it is"),
    ],
)
def test_non_string_outputs_are_compact_json(registry, value, expected):
    @tool
    def give(context: ToolContext) -> Any:
        return value

    assert run("give", {}, enabled=["give"]) == ToolResult(output=expected, is_error=False)


@pytest.mark.parametrize("value", [object(), float("nan")])
def test_an_output_that_is_not_json_is_an_error(registry, value):
    @tool
    def odd(context: ToolContext) -> Any:
        return value

    result = run("odd", {}, enabled=["odd"])
    assert result.is_error
    assert result.output.startswith("odd failed:")


def test_events_reach_emit_from_the_callers_thread_even_if_emit_fails(registry):
    seen: list[tuple[str, dict[str, Any], str]] = []

    def emit(event_type: str, payload: dict[str, Any]) -> None:
        seen.append((event_type, payload, threading.current_thread().name))
        if len(seen) == 1:
            raise RuntimeError("redis is down")

    @tool
    def noisy(context: ToolContext) -> str:
        context.emit("one", {"n": 1})
        context.emit("two", {"n": 2})
        return "done"

    result = run("noisy", {}, context=offline_context(emit=emit), enabled=["noisy"])
    assert result == ToolResult(output="done", is_error=False)
    me = threading.current_thread().name
    assert seen == [("one", {"n": 1}, me), ("two", {"n": 2}, me)]


@pytest.mark.django_db
def test_a_failing_tool_inside_a_transaction_leaves_it_usable(registry, owner):
    @tool
    def duplicate(context: ToolContext) -> str:
        User(username=owner.username).save()  # the database refuses it: unique violation
        return "unreachable"

    result = run("duplicate", {}, enabled=["duplicate"])
    assert result.is_error
    assert result.output.startswith("duplicate failed: IntegrityError")
    assert User.objects.filter(username=owner.username).count() == 1
