"""Errors of /responses in OpenAI's shape, parsed by the SDK into its exception classes."""

import openai
import pytest

from conversations.models import Conversation, Run
from tests.support.fake_openai import Script
from tests.support.openai_api import body_of

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("worker")]


@pytest.mark.parametrize(
    ("kwargs", "param"),
    [
        ({"input": "x", "tools": [{"type": "web_search"}]}, "tools[0].type"),
        ({"input": "x", "tools": [{"type": "function", "name": "calculator"}]}, "tools[0].name"),
        ({"input": "x", "tool_choice": {"type": "function", "name": "nope"}}, "tool_choice.name"),
        ({"input": "x", "temperature": 3}, "temperature"),
        ({"input": []}, "input"),
        ({"input": [{"role": "robot", "content": "x"}]}, "input[0].role"),
        ({"input": "x", "background": True, "store": False}, "store"),
        (
            {"input": "x", "conversation": "conv_" + "0" * 32, "previous_response_id": "resp_1"},
            "previous_response_id",
        ),
        ({"input": "x", "extra_body": {"seed": 5}}, "seed"),
        # Structured output is refused, not silently answered in prose.
        (
            {"input": "x", "text": {"format": {"type": "json_schema", "name": "s", "schema": {}}}},
            "text.format.type",
        ),
        ({"input": "x", "text": {"format": {"type": "json_object"}}}, "text.format.type"),
        ({"input": "x", "reasoning": {"effort": "extreme"}}, "reasoning.effort"),
    ],
)
def test_bad_requests_name_their_parameter(client, kwargs, param):
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(model="m", **kwargs)
    assert body_of(caught.value)["param"] == param


@pytest.mark.parametrize(
    ("name", "refused"),
    [("kit__record", True), ("kit__anything", True), ("kitchen__timer", False), ("kit_x", False)],
)
def test_a_client_tool_may_not_take_a_tool_servers_name(client, model, name, refused):
    from conversations import services
    from conversations.models import ToolServer

    services.tool_server_create(actor=None, name="kit", url="http://127.0.0.1:9/mcp")
    tools = [{"type": "function", "name": name}]
    if refused:
        with pytest.raises(openai.BadRequestError) as caught:
            client.responses.create(model="m", input="x", tools=tools)
        assert body_of(caught.value)["param"] == "tools[0].name"
        assert "Parley's own tools" in body_of(caught.value)["message"]
        assert not Run.objects.exists()
    else:
        model.push(Script(text="Fine."))
        assert client.responses.create(model="m", input="x", tools=tools).status == "completed"
    assert ToolServer.objects.count() == 1


def test_a_response_while_another_runs_is_conversation_locked_not_retried(client, owner):
    conversation = client.conversations.create()
    stored = Conversation.objects.get(owner=owner)
    Run.objects.create(conversation=stored, status=Run.Status.QUEUED)
    with pytest.raises(openai.BadRequestError) as caught:
        client.with_options(max_retries=2).responses.create(
            model="m", input="x", conversation=conversation.id
        )
    assert body_of(caught.value)["code"] == "conversation_locked"
    assert caught.value.response.headers["x-should-retry"] == "false"
    assert stored.messages.count() == 0  # nothing stored for a refused response


def test_plain_text_format_and_ignored_parameters_are_accepted(client, model):
    model.push(Script(text="Plain."))
    response = client.responses.create(
        model="m",
        input="x",
        text={"format": {"type": "text"}},
        include=["message.output_text.logprobs"],
        truncation="auto",
    )
    assert response.output_text == "Plain."


def test_an_unknown_conversation_is_not_found(client):
    with pytest.raises(openai.NotFoundError):
        client.responses.create(model="m", input="x", conversation="conv_" + "0" * 32)


def test_the_model_budget_applies(client, model, settings):
    settings.PARLEY_API_MODEL_THROTTLE_RATE = "1/minute"
    model.push(Script(text="One."))
    client.responses.create(model="m", input="First.")
    with pytest.raises(openai.RateLimitError) as caught:
        client.responses.create(model="m", input="Second.")
    assert body_of(caught.value)["code"] == "rate_limit_exceeded"


def test_a_failed_model_call_is_a_failed_response(client, model):
    model.push(Script.http(400, message="bad prompt"))
    response = client.responses.create(model="m", input="x")
    assert response.status == "failed"
    assert response.error is not None
    assert response.error.code == "invalid_prompt"
