"""The tool registry, tool_execute's error handling and the built-in tools."""

import dataclasses
import json
import threading
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

import pytest
from pydantic import Field

from accounts.models import User
from conversations import services, tools
from conversations.models import Conversation
from conversations.tools import ToolContext, ToolResult, tool, tool_execute
from tests.conversations.helpers import BUILTIN_TOOLS, refetch

ALL = list(BUILTIN_TOOLS)


@pytest.fixture
def registry():
    """Test tools registered inside this fixture vanish afterwards."""
    with tools.isolated_registry():
        yield


def offline_context(**overrides: Any) -> ToolContext:
    """A context for tools that never touch the database (unsaved model instances)."""
    user = User(username="nobody")
    values: dict[str, Any] = {
        "call_id": "call_1",
        "is_resume": False,
        "conversation": Conversation(owner=user),
        "user": user,
    }
    values.update(overrides)
    return ToolContext(**values)


def run(
    name: str,
    arguments: Any = None,
    *,
    context: ToolContext | None = None,
    enabled: list[str] | None = None,
) -> ToolResult:
    raw = arguments if isinstance(arguments, str) else json.dumps(arguments or {})
    result = tool_execute(
        name=name,
        arguments=raw,
        context=context or offline_context(),
        enabled=ALL if enabled is None else enabled,
    )
    assert isinstance(result.output, str)
    return result


# --- registry and schema ---------------------------------------------------------------


def test_schema_comes_from_type_hints_and_docstring(registry):
    @tool
    def sample(
        context: ToolContext,
        count: int,
        label: Annotated[str, Field(description="What to call it.")] = "x",
        ratio: float = 0.5,
        flags: list[str] | None = None,
    ) -> str:
        """Do a sample thing
        over two lines.

        Details that are not part of the description.
        """
        return "ok"

    (definition,) = tools.tool_definitions(["sample"])
    assert definition["type"] == "function"
    function = definition["function"]
    assert function["name"] == "sample"
    assert function["description"] == "Do a sample thing over two lines."
    schema = function["parameters"]
    assert schema["type"] == "object"
    assert schema["additionalProperties"] is False
    assert schema["required"] == ["count"]
    props = schema["properties"]
    assert list(props) == ["count", "label", "ratio", "flags"]
    assert props["count"]["type"] == "integer"
    assert props["label"] == {"type": "string", "default": "x", "description": "What to call it."}
    assert props["ratio"]["type"] == "number"
    assert "title" not in schema
    assert not any("title" in prop for prop in props.values())


def test_decorator_options_override_name_description_and_flags(registry):
    @tool(name="renamed", description="Custom words.", timeout=3, mutating=True)
    def original(context: ToolContext) -> str:
        """Docstring that is not used."""
        return "ok"

    entry = tools.tool_get(name="renamed")
    assert entry is not None
    assert (entry.description, entry.timeout, entry.mutating) == ("Custom words.", 3, True)
    assert entry.parameters == {"type": "object", "properties": {}, "additionalProperties": False}
    assert tools.tool_get(name="original") is None


def test_tool_needs_context_first_and_hints_for_every_argument(registry):
    with pytest.raises(TypeError, match="type hint"):

        @tool
        def no_hint(context: ToolContext, value) -> str:
            return ""

    with pytest.raises(TypeError, match="ToolContext"):

        @tool
        def no_context(*, value: int) -> str:
            return ""


def test_registration_is_idempotent_and_names_are_unique(registry):
    def make() -> Any:
        def twice(context: ToolContext) -> str:
            return "ok"

        return twice

    tool(make())
    tool(make())  # same module and qualified name: a re-import, replaces quietly
    assert [e["name"] for e in tools.tool_catalog()].count("twice") == 1

    def other(context: ToolContext) -> str:
        return "other"

    with pytest.raises(ValueError, match="already registered"):
        tool(name="twice")(other)


def test_test_registrations_do_not_leak():
    with tools.isolated_registry():

        @tool
        def temporary(context: ToolContext) -> str:
            return "ok"

        assert tools.tool_get(name="temporary") is not None
    assert tools.tool_get(name="temporary") is None
    assert [entry["name"] for entry in tools.tool_catalog()] == ALL


def test_definitions_follow_registry_order_and_skip_unknown_names():
    names = [
        d["function"]["name"]
        for d in tools.tool_definitions(["update_draft", "nope", "calculator"])
    ]
    assert names == ["calculator", "update_draft"]
    assert tools.tool_definitions([]) == []


def test_catalog_lists_every_builtin_with_its_schema():
    catalog = tools.tool_catalog()
    assert [entry["name"] for entry in catalog] == ALL
    for entry in catalog:
        assert entry["description"]
        assert entry["parameters"]["type"] == "object"
    assert {e["name"]: e["mutating"] for e in catalog}["update_draft"] is True


# --- tool_execute: every failure is a result -------------------------------------------


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
        User.objects.create_user(username=owner.username)  # unique violation
        return "unreachable"

    result = run("duplicate", {}, enabled=["duplicate"])
    assert result.is_error
    assert result.output.startswith("duplicate failed: IntegrityError")
    assert User.objects.filter(username=owner.username).count() == 1


# --- calculator -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("1 + 2 * 3", "7"),
        ("(1 + 2) * 3", "9"),
        ("2 ** 3 ** 2", "512"),
        ("-3 ** 2", "-9"),
        ("(-3) ** 2", "9"),
        ("- -4", "4"),
        ("+5 - -5", "10"),
        ("10 / 4", "2.5"),
        ("10 / 2", "5.0"),
        ("7 // 2", "3"),
        ("-7 // 2", "-4"),
        ("7 % 3", "1"),
        ("0.1 + 0.2", "0.3"),
        ("1.5e3 * 2", "3000.0"),
        ("2 ** -1", "0.5"),
        ("2 ** 100", "1267650600228229401496703205376"),
        ("sqrt(16)", "4.0"),
        ("abs(-3)", "3"),
        ("round(2.567, 2)", "2.57"),
        ("min(3, 1, 2) + max(4, 5)", "6"),
        ("floor(2.7) + ceil(2.1)", "5"),
        ("pi", "3.14159265359"),
        ("2 * e", "5.43656365692"),
        ("log(8, 2)", "3.0"),
        ("  3  ", "3"),
        ("-0.0", "0.0"),
    ],
)
def test_calculator_evaluates(expression, expected):
    assert run("calculator", {"expression": expression}) == ToolResult(expected, False)


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("1 / 0", "division by zero"),
        ("5 // 0", "division by zero"),
        ("5 % 0", "division by zero"),
        ("x + 1", "unknown name 'x'"),
        ("__import__('os').system('true')", "function \"__import__('os').system\" is not"),
        ("__import__('os')", "the function '__import__' is not available"),
        ("open('/etc/passwd')", "the function 'open' is not available"),
        ("(1).__class__", "attribute access is not allowed"),
        ("math.sqrt(4)", "the function 'math.sqrt' is not available"),
        ("math.pi", "attribute access is not allowed"),
        ("lambda: 1", "lambda is not allowed"),
        ("'a' * 3", "'a' is not a number"),
        ("True + 1", "True is not a number"),
        ("1j", "1j is not a number"),
        ("[1, 2]", "List is not allowed"),
        ("1 < 2", "comparisons are not supported"),
        ("1 << 2", "operator LShift is not supported"),
        ("9 ** 9 ** 9", "too large"),
        ("10 ** 100000", "too large"),
        ("(2 ** 4000) * (2 ** 4000)", "too large"),
        ("1e308 * 10", "too large"),
        ("1e999", "too large"),
        ("exp(1000)", "too large"),
        ("(-8) ** 0.5", "not a real number"),
        ("sqrt(-1)", "sqrt(): math domain error"),
        ("max()", "max():"),
        ("sqrt(x=4)", "positional arguments only"),
        ("1 +", "invalid expression"),
        ("", "expression is empty"),
        ("1" + "+1" * 600, "longer than 1000 characters"),
        ("-" * 999 + "1", "nested too deeply"),
    ],
)
def test_calculator_refuses_with_a_clear_error(expression, message):
    result = run("calculator", {"expression": expression})
    assert result.is_error
    assert result.output.startswith("calculator failed: ")
    assert message in result.output


# --- current_time -----------------------------------------------------------------------


@pytest.mark.parametrize("zone", ["Europe/Paris", "Asia/Kolkata", "UTC"])
def test_current_time_in_a_zone(zone):
    result = run("current_time", {"timezone": zone})
    assert not result.is_error
    moment = datetime.fromisoformat(result.output)
    assert moment.utcoffset() is not None
    assert abs(moment - datetime.now(UTC)) < timedelta(minutes=1)
    if zone == "Asia/Kolkata":
        assert moment.utcoffset() == timedelta(hours=5, minutes=30)


def test_current_time_defaults_to_utc():
    moment = datetime.fromisoformat(run("current_time", {}).output)
    assert moment.utcoffset() == timedelta(0)


@pytest.mark.parametrize("zone", ["Mars/Olympus_Mons", "../../etc/passwd", ""])
def test_current_time_refuses_unknown_zones(zone):
    result = run("current_time", {"timezone": zone})
    assert result.is_error
    assert "unknown time zone" in result.output


# --- update_draft -----------------------------------------------------------------------


def owner_context(conversation: Conversation, **overrides: Any) -> ToolContext:
    values: dict[str, Any] = {
        "call_id": "call_draft",
        "is_resume": False,
        "conversation": conversation,
        "user": conversation.owner,
    }
    values.update(overrides)
    return ToolContext(**values)


@pytest.mark.django_db
def test_update_draft_sets_the_draft_as_the_assistant_and_emits(conversation):
    services.conversation_draft_update(conversation=conversation, draft="mine", by_user=True)
    events: list[tuple[str, dict[str, Any]]] = []
    context = owner_context(conversation, emit=lambda t, p: events.append((t, p)))

    result = run("update_draft", {"draft": "Dear Bob,"}, context=context)

    assert result == ToolResult(output="Draft updated (9 characters).", is_error=False)
    stored = refetch(conversation)
    assert (stored.draft, stored.draft_edited) == ("Dear Bob,", False)
    assert events == [("draft.updated", {"draft": "Dear Bob,"})]


@pytest.mark.django_db
def test_update_draft_again_with_the_same_text_is_a_no_op(conversation):
    events: list[tuple[str, dict[str, Any]]] = []
    context = owner_context(conversation, emit=lambda t, p: events.append((t, p)))
    run("update_draft", {"draft": "v1"}, context=context)
    before = refetch(conversation).updated_at

    again = run("update_draft", {"draft": "v1"}, context=context)

    assert not again.is_error
    assert "nothing changed" in again.output
    assert refetch(conversation).updated_at == before
    assert len(events) == 1
    # A resumed call re-publishes: the crashed attempt may have lost its event.
    run("update_draft", {"draft": "v1"}, context=replace_resume(context))
    assert events == [("draft.updated", {"draft": "v1"})] * 2


def replace_resume(context: ToolContext) -> ToolContext:
    return ToolContext(
        call_id=context.call_id,
        is_resume=True,
        conversation=context.conversation,
        user=context.user,
        emit=context.emit,
    )


def recording(conversation: Conversation, call_id: str) -> tuple[ToolContext, list[Any]]:
    events: list[tuple[str, dict[str, Any]]] = []
    context = owner_context(conversation, call_id=call_id, emit=lambda t, p: events.append((t, p)))
    return context, events


@pytest.mark.django_db
def test_a_resumed_update_draft_that_already_wrote_keeps_a_later_user_edit(conversation):
    context, events = recording(conversation, "c1")
    run("update_draft", {"draft": "model's text"}, context=context)
    # The worker died before storing the result; the user edits the draft meanwhile.
    services.conversation_draft_update(conversation=conversation, draft="user's text")
    events.clear()

    result = run("update_draft", {"draft": "model's text"}, context=replace_resume(context))

    assert result == ToolResult(output="Draft updated (12 characters).", is_error=False)
    stored = refetch(conversation)
    assert (stored.draft, stored.draft_edited) == ("user's text", True)
    # Re-published as it is now: the first attempt may have died before publishing.
    assert events == [("draft.updated", {"draft": "user's text"})]


@pytest.mark.django_db
def test_a_fresh_update_draft_writes_even_with_the_last_writers_call_id(conversation):
    context, events = recording(conversation, "c1")
    run("update_draft", {"draft": "model's text"}, context=context)
    services.conversation_draft_update(conversation=conversation, draft="user's text")
    events.clear()

    result = run("update_draft", {"draft": "model's text"}, context=context)

    assert result.output == "Draft updated (12 characters)."
    assert refetch(conversation).draft == "model's text"
    assert events == [("draft.updated", {"draft": "model's text"})]


@pytest.mark.django_db
def test_a_resumed_update_draft_whose_first_attempt_never_wrote_writes(conversation):
    earlier, _ = recording(conversation, "c0")
    run("update_draft", {"draft": "first"}, context=earlier)
    services.conversation_draft_update(conversation=conversation, draft="user's text")
    context, events = recording(conversation, "c1")

    result = run("update_draft", {"draft": "second"}, context=replace_resume(context))

    assert result.output == "Draft updated (6 characters)."
    stored = refetch(conversation)
    assert (stored.draft, stored.draft_edited, stored.draft_call_id) == ("second", False, "c1")
    assert events == [("draft.updated", {"draft": "second"})]


@pytest.mark.django_db
def test_update_draft_that_found_its_text_in_place_is_not_repeated_on_resume(conversation):
    services.conversation_draft_update(conversation=conversation, draft="same")
    context, events = recording(conversation, "c1")
    assert "nothing changed" in run("update_draft", {"draft": "same"}, context=context).output
    services.conversation_draft_update(conversation=conversation, draft="user's text")

    run("update_draft", {"draft": "same"}, context=replace_resume(context))

    assert refetch(conversation).draft == "user's text"
    assert events == [("draft.updated", {"draft": "user's text"})]


@pytest.mark.django_db
def test_update_draft_refuses_an_oversized_draft(conversation, settings):
    settings.PARLEY_MAX_DRAFT_CHARS = 10
    result = run("update_draft", {"draft": "x" * 11}, context=owner_context(conversation))
    assert result.is_error
    assert result.output == ("update_draft failed: draft is 11 characters long; the limit is 10")
    assert refetch(conversation).draft == ""


@pytest.mark.django_db(transaction=True)
def test_update_draft_outside_a_transaction_runs_in_a_worker_thread(conversation):
    events: list[tuple[str, dict[str, Any]]] = []
    context = owner_context(conversation, emit=lambda t, p: events.append((t, p)))
    result = run("update_draft", {"draft": "from a thread"}, context=context)
    assert not result.is_error
    assert refetch(conversation).draft == "from a thread"
    assert events == [("draft.updated", {"draft": "from a thread"})]


def seen_now(conversation: Conversation) -> int:
    """The user's draft edits as a model call starting now would see them."""
    return refetch(conversation).draft_edit_count


@pytest.mark.django_db
def test_update_draft_keeps_a_user_edit_the_model_has_not_seen(conversation):
    context, events = recording(conversation, "c1")
    context = dataclasses.replace(context, draft_edits_seen=seen_now(conversation))
    # The user saves while the model is still working on its reply.
    services.conversation_draft_update(conversation=conversation, draft="user's text")

    result = run("update_draft", {"draft": "model's text"}, context=context)

    assert result.is_error
    assert result.output == (
        "update_draft failed: the user edited the draft while you were working, and their "
        "edit wins: your text was not saved. If the draft still needs changing, call "
        "update_draft again with the complete text, keeping their changes. The draft now "
        'reads: "user\'s text"'
    )
    stored = refetch(conversation)
    # Untouched: the next turn still tells the model about the edit.
    assert (stored.draft, stored.draft_edited, stored.draft_call_id) == ("user's text", True, "")
    assert events == []


@pytest.mark.django_db
def test_update_draft_writes_once_the_model_has_seen_the_users_edit(conversation):
    services.conversation_draft_update(conversation=conversation, draft="user's text")
    context, events = recording(conversation, "c2")
    context = dataclasses.replace(context, draft_edits_seen=seen_now(conversation))

    result = run("update_draft", {"draft": "user's text, merged"}, context=context)

    assert result.output == "Draft updated (19 characters)."
    stored = refetch(conversation)
    assert (stored.draft, stored.draft_edited) == ("user's text, merged", False)
    assert events == [("draft.updated", {"draft": "user's text, merged"})]


@pytest.mark.django_db
def test_update_draft_that_agrees_with_the_users_unseen_edit_is_no_conflict(conversation):
    context, _ = recording(conversation, "c1")
    context = dataclasses.replace(context, draft_edits_seen=seen_now(conversation))
    services.conversation_draft_update(conversation=conversation, draft="same words")

    result = run("update_draft", {"draft": "same words"}, context=context)

    assert not result.is_error
    assert "nothing changed" in result.output
    assert refetch(conversation).draft_edited  # still news for the next turn


@pytest.mark.django_db
def test_the_assistants_own_writes_never_block_its_next_one(conversation):
    # Two update_draft calls in one reply: the first write is the model's, not the user's.
    seen = seen_now(conversation)
    for call_id, text in [("c1", "first"), ("c2", "second")]:
        context, _ = recording(conversation, call_id)
        result = run(
            "update_draft",
            {"draft": text},
            context=dataclasses.replace(context, draft_edits_seen=seen),
        )
        assert not result.is_error
    assert refetch(conversation).draft == "second"


@pytest.mark.django_db
def test_a_resumed_update_draft_that_already_wrote_is_done_despite_a_later_edit(conversation):
    context, events = recording(conversation, "c1")
    context = dataclasses.replace(context, draft_edits_seen=seen_now(conversation))
    run("update_draft", {"draft": "model's text"}, context=context)
    # The worker died before storing the result; the user edits the draft meanwhile.
    services.conversation_draft_update(conversation=conversation, draft="user's text")
    events.clear()

    result = run(
        "update_draft",
        {"draft": "model's text"},
        context=dataclasses.replace(context, is_resume=True),
    )

    # The call did its work the first time: no error for the model, no write now.
    assert result == ToolResult(output="Draft updated (12 characters).", is_error=False)
    assert refetch(conversation).draft == "user's text"
    assert events == [("draft.updated", {"draft": "user's text"})]


# --- search_conversations ---------------------------------------------------------------


@pytest.fixture
def histories(owner, outsider, conversation):
    services.user_message_append(conversation=conversation, content="I saw a Zebra today")
    services.user_message_append(conversation=conversation, content="nothing to see")
    other = services.conversation_create(owner=owner, title="Zoo")
    services.user_message_append(conversation=other, content="zebras are striped")
    secret = services.conversation_create(owner=outsider, title="Secret")
    services.user_message_append(conversation=secret, content="mallory's zebra secret")
    return conversation, other


def search(owner: User, conversation: Conversation, **arguments: Any) -> ToolResult:
    return run("search_conversations", arguments, context=owner_context(conversation))


@pytest.mark.django_db
def test_search_finds_only_the_owners_messages(owner, histories):
    conversation, other = histories
    result = search(owner, conversation, query="zebra")
    assert not result.is_error
    found = json.loads(result.output)
    assert [(f["conversation_title"], f["snippet"]) for f in found] == [
        ("Zoo", "**zebra**s are striped"),
        ("Cats", "I saw a **Zebra** today"),
    ]
    assert found[0] == {
        "conversation_id": str(other.id),
        "conversation_title": "Zoo",
        "seq": 1,
        "role": "user",
        "snippet": "**zebra**s are striped",
    }
    assert "mallory" not in result.output


@pytest.mark.django_db
def test_search_as_the_outsider_sees_only_their_own(outsider, histories):
    secret = Conversation.objects.get(owner=outsider)
    found = json.loads(search(outsider, secret, query="zebra").output)
    assert [f["conversation_id"] for f in found] == [str(secret.id)]


@pytest.mark.django_db
def test_search_limit_and_its_bounds(owner, histories):
    conversation, _ = histories
    assert len(json.loads(search(owner, conversation, query="zebra", limit=1).output)) == 1
    assert len(json.loads(search(owner, conversation, query="zebra", limit="2").output)) == 2
    for bad in (0, 21):
        result = search(owner, conversation, query="zebra", limit=bad)
        assert result.is_error
        assert result.output.startswith("Invalid arguments for search_conversations: limit:")


@pytest.mark.django_db
def test_search_with_an_empty_query_is_an_error(owner, conversation):
    result = search(owner, conversation, query="   ")
    assert result == ToolResult(
        output="search_conversations failed: the query is empty", is_error=True
    )


@pytest.mark.django_db
def test_search_snippets_stay_short_and_show_the_match(owner, conversation):
    content = "lorem ipsum " * 100 + "NEEDLE in the haystack " + "dolor sit " * 100
    services.user_message_append(conversation=conversation, content=content)
    (found,) = json.loads(search(owner, conversation, query="needle").output)
    snippet = found["snippet"]
    assert len(snippet) <= 200
    assert "**NEEDLE** in the haystack" in snippet
    assert snippet.startswith("…")
    assert snippet.endswith("…")
