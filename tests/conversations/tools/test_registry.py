"""The tool registry: `@tool`, argument schemas from type hints and docstrings, and
the definitions and catalog built from it."""

from typing import Annotated, Any

import pytest
from pydantic import Field

from conversations import tools
from conversations.tools import ToolContext, tool
from tests.support.tools import ALL


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
