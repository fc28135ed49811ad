"""Every parameter of Open Responses' CreateResponseBody at `POST /responses`: taken,
honoured where Parley can (what the upstream model is sent, the tool loop, truncation),
echoed in the response, and refused with a 400 naming it when its value is wrong."""

from typing import Any

import openai
import pytest

from conversations.models import Conversation, Message, Run
from tests.support.fake_openai import Script

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("worker")]

CALC = ("call_1", "calculator", '{"expression": "6*7"}')
WEATHER = {"type": "function", "name": "get_weather", "parameters": {"type": "object"}}


def created(raw, body: dict[str, Any]) -> dict[str, Any]:
    answer = raw.post("/responses", json=body)
    assert answer.status_code == 200, answer.text
    return answer.json()


def test_every_parameter_of_the_specification_is_taken_and_echoed(raw, model, settings):
    settings.PARLEY_REASONING_EFFORT_MODELS = ["o3*"]
    model.push(Script(text="Briefly: yes."))
    response = created(
        raw,
        {
            "model": "o3-mini",
            "input": "Is it so?",
            "previous_response_id": None,
            "include": ["message.output_text.logprobs", "reasoning.encrypted_content"],
            "tools": [WEATHER],
            "tool_choice": "auto",
            "metadata": {"via": "spec"},
            "text": {"format": {"type": "text"}, "verbosity": "low"},
            "temperature": 0.4,
            "top_p": 0.8,
            "presence_penalty": 0.5,
            "frequency_penalty": -0.5,
            "parallel_tool_calls": False,
            "stream": False,
            "stream_options": None,
            "background": False,
            "max_output_tokens": 200,
            "max_tool_calls": 3,
            "reasoning": {"effort": "low", "summary": "auto"},
            "safety_identifier": "user-1234",
            "prompt_cache_key": "cache-7",
            "truncation": "disabled",
            "instructions": "Be brief.",
            "store": True,
            "service_tier": "flex",
            "top_logprobs": 0,
            "user": "someone",
        },
    )

    assert response["status"] == "completed"
    assert response["output"][0]["content"][0]["text"] == "Briefly: yes."
    echoed = {
        key: response[key]
        for key in (
            "truncation",
            "text",
            "reasoning",
            "max_tool_calls",
            "service_tier",
            "safety_identifier",
            "prompt_cache_key",
            "top_logprobs",
            "presence_penalty",
            "frequency_penalty",
            "tool_choice",
        )
    }
    assert echoed == {
        "truncation": "disabled",
        "text": {"format": {"type": "text"}, "verbosity": "low"},
        "reasoning": {"effort": "low", "summary": "auto"},
        "max_tool_calls": 3,
        "service_tier": "flex",
        "safety_identifier": "user-1234",
        "prompt_cache_key": "cache-7",
        "top_logprobs": 0,
        "presence_penalty": 0.5,
        "frequency_penalty": -0.5,
        "tool_choice": "auto",
    }
    sent = model.requests[-1].body
    assert (sent["presence_penalty"], sent["frequency_penalty"]) == (0.5, -0.5)
    assert sent["reasoning_effort"] == "low"
    assert (sent["temperature"], sent["top_p"], sent["max_completion_tokens"]) == (0.4, 0.8, 200)
    # Echoed only: nothing the upstream would refuse is passed on.
    for key in ("service_tier", "safety_identifier", "prompt_cache_key", "verbosity", "user"):
        assert key not in sent


def test_unsaid_settings_echo_their_defaults_and_send_nothing(raw, model):
    model.push(Script(text="Hi."))
    response = created(raw, {"model": "o3-mini", "input": "Hi."})

    assert response["truncation"] == "auto"
    assert response["text"] == {"format": {"type": "text"}, "verbosity": "medium"}
    assert response["reasoning"] is None
    assert response["max_tool_calls"] is None
    assert response["top_logprobs"] == 0
    sent = model.requests[-1].body
    for key in ("presence_penalty", "frequency_penalty", "reasoning_effort", "tool_choice"):
        assert key not in sent
    assert Run.objects.get().generation == {}


def test_the_reasoning_effort_is_not_sent_to_a_model_that_does_not_take_it(client, model, settings):
    settings.PARLEY_REASONING_EFFORT_MODELS = ["o3*", "gpt-5*"]
    model.push(Script(text="Sure."), Script(text="Sure."))

    plain = client.responses.create(model="llama3", input="Hi.", reasoning={"effort": "high"})
    thinking = client.responses.create(
        model="gpt-5-mini", input="Hi.", reasoning={"effort": "high"}
    )

    assert plain.status == thinking.status == "completed"
    assert plain.reasoning is not None
    assert plain.reasoning.effort == "high"
    first, second = model.requests
    assert "reasoning_effort" not in first.body
    assert second.body["reasoning_effort"] == "high"


@pytest.mark.parametrize("store", [True, False])
def test_the_tool_choice_holds_for_the_first_model_call_and_the_allowed_tools_for_all(
    client, model, store
):
    model.push(Script(tool_calls=[CALC]), Script(text="It is 42."))
    choice = {
        "type": "allowed_tools",
        "mode": "required",
        "tools": [{"type": "function", "name": "calculator"}],
    }

    response = client.responses.create(
        model="m", input="What is 6*7?", tools=[WEATHER], tool_choice=choice, store=store
    )

    assert response.status == "completed"
    assert response.output_text == "It is 42."
    assert response.tool_choice.model_dump() == choice
    first, second = model.requests
    for request in (first, second):
        assert [tool["function"]["name"] for tool in request.body["tools"]] == ["calculator"]
    assert (first.body["tool_choice"], second.body["tool_choice"]) == ("required", "auto")


@pytest.mark.parametrize("store", [True, False])
def test_a_required_tool_choice_does_not_hold_after_the_first_call(client, model, store):
    model.push(Script(tool_calls=[CALC]), Script(text="It is 42."))

    response = client.responses.create(
        model="m", input="What is 6*7?", tool_choice="required", store=store
    )

    assert response.status == "completed"
    first, second = model.requests
    assert (first.body["tool_choice"], second.body["tool_choice"]) == ("required", "auto")


@pytest.mark.parametrize("store", [True, False])
def test_past_max_tool_calls_a_call_is_answered_not_run_and_the_model_must_answer(
    client, model, store
):
    asked = [
        ("call_1", "calculator", '{"expression": "1+1"}'),
        ("call_2", "calculator", '{"expression": "2+2"}'),
        ("call_3", "calculator", '{"expression": "3+3"}'),
    ]
    model.push(Script(tool_calls=asked), Script(text="2 and 4."))

    response = client.responses.create(model="m", input="Add them.", max_tool_calls=2, store=store)

    assert response.status == "completed"
    assert response.max_tool_calls == 2
    outputs = [item for item in response.output if item.type == "function_call_output"]
    assert [(o.call_id, o.output) for o in outputs[:2]] == [("call_1", "2"), ("call_2", "4")]
    assert outputs[2].call_id == "call_3"
    assert "Not run" in str(outputs[2].output)
    assert "at most 2 tool calls" in str(outputs[2].output)
    assert response.output_text == "2 and 4."
    assert model.requests[1].body["tool_choice"] == "none"


LONG = "word " * 80  # about a hundred tokens


@pytest.mark.parametrize("store", [True, False])
def test_truncation_disabled_fails_a_response_that_does_not_fit(client, model, settings, store):
    settings.PARLEY_CONTEXT_TOKENS = 200
    items = [
        {"role": "user", "content": LONG},
        {"role": "assistant", "content": LONG},
        {"role": "user", "content": "And now?"},
    ]

    response = client.responses.create(model="m", input=items, truncation="disabled", store=store)

    assert response.status == "failed"
    assert response.error is not None
    assert "does not fit" in response.error.message
    assert "truncation: auto" in response.error.message
    assert response.truncation == "disabled"
    assert model.requests == []
    if store:
        assert Run.objects.get().error["code"] == "context_length_exceeded"  # type: ignore[index]


@pytest.mark.parametrize("store", [True, False])
def test_truncation_auto_drops_the_oldest_turns_and_answers(client, model, settings, store):
    settings.PARLEY_CONTEXT_TOKENS = 200
    model.push(Script(text="Now this."))
    items = [
        {"role": "user", "content": LONG},
        {"role": "assistant", "content": LONG},
        {"role": "user", "content": "And now?"},
    ]

    response = client.responses.create(model="m", input=items, truncation="auto", store=store)

    assert response.status == "completed"
    assert response.output_text == "Now this."
    sent = model.requests[0].body["messages"]
    assert sent[-1] == {"role": "user", "content": "And now?"}
    assert len(sent) < 3


@pytest.mark.parametrize(
    ("change", "param", "code"),
    [
        ({"presence_penalty": 2.5}, "presence_penalty", None),
        ({"frequency_penalty": "high"}, "frequency_penalty", "invalid_type"),
        ({"max_tool_calls": 0}, "max_tool_calls", None),
        ({"max_tool_calls": 1.5}, "max_tool_calls", "invalid_type"),
        ({"max_output_tokens": 0}, "max_output_tokens", None),
        ({"truncation": "sometimes"}, "truncation", None),
        ({"reasoning": "low"}, "reasoning", "invalid_type"),
        ({"reasoning": {"effort": "extreme"}}, "reasoning.effort", None),
        ({"reasoning": {"summary": "long"}}, "reasoning.summary", None),
        ({"reasoning": {"effort": "low", "budget": 5}}, "reasoning.budget", "unknown_parameter"),
        ({"text": {"verbosity": "loud"}}, "text.verbosity", None),
        (
            {"text": {"format": {"type": "json_schema", "name": "s", "schema": {}}}},
            "text.format.type",
            "unsupported_value",
        ),
        ({"text": {"format": {"type": "json_object"}}}, "text.format.type", "unsupported_value"),
        ({"text": "plain"}, "text", "invalid_type"),
        ({"top_logprobs": 5}, "top_logprobs", "unsupported_value"),
        ({"top_logprobs": 21}, "top_logprobs", None),
        ({"top_logprobs": -1}, "top_logprobs", None),
        ({"service_tier": "gold"}, "service_tier", None),
        ({"safety_identifier": "x" * 65}, "safety_identifier", None),
        ({"prompt_cache_key": 7}, "prompt_cache_key", "invalid_type"),
        ({"include": "reasoning.encrypted_content"}, "include", "invalid_type"),
        ({"include": [3]}, "include[0]", "invalid_type"),
        ({"stream_options": {"obfuscate": True}}, "stream_options.obfuscate", "unknown_parameter"),
        (
            {"stream_options": {"include_obfuscation": "yes"}},
            "stream_options.include_obfuscation",
            "invalid_type",
        ),
        ({"user": 5}, "user", "invalid_type"),
        ({"tool_choice": "sometimes"}, "tool_choice", None),
        ({"tool_choice": {"type": "allowed_tools", "tools": []}}, "tool_choice.tools", None),
        (
            {"tool_choice": {"type": "allowed_tools", "mode": "often", "tools": [{}]}},
            "tool_choice.mode",
            None,
        ),
        (
            {
                "tool_choice": {
                    "type": "allowed_tools",
                    "tools": [{"type": "function", "name": "teleport"}],
                }
            },
            "tool_choice.tools[0].name",
            None,
        ),
        (
            {"tool_choice": {"type": "allowed_tools", "tools": [{"type": "mcp", "name": "x"}]}},
            "tool_choice.tools[0].type",
            None,
        ),
    ],
)
def test_a_wrong_value_is_refused_naming_its_parameter_and_nothing_is_stored(
    raw, owner, change, param, code
):
    answer = raw.post("/responses", json={"model": "m", "input": "x", **change})

    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["param"] == param
    if code is not None:
        assert error["code"] == code
    assert not Run.objects.exists()
    assert not Conversation.objects.filter(owner=owner).exists()
    assert not Message.objects.exists()


def test_allowed_tools_may_name_the_requests_tools_and_parleys_own(raw, model):
    model.push(Script(text="Fine."))
    choice = {
        "type": "allowed_tools",
        "mode": "auto",
        "tools": [
            {"type": "function", "name": "get_weather"},
            {"type": "function", "name": "current_time"},
        ],
    }

    response = created(
        raw, {"model": "m", "input": "Weather?", "tools": [WEATHER], "tool_choice": choice}
    )

    assert response["status"] == "completed"
    assert response["tool_choice"] == choice
    offered = [tool["function"]["name"] for tool in model.requests[0].body["tools"]]
    assert sorted(offered) == ["current_time", "get_weather"]


def test_the_sdk_takes_every_new_setting(client, model):
    """The official SDK's own parameter names reach the door unchanged."""
    model.push(Script(text="Ok."))

    response = client.responses.create(
        model="m",
        input="Hi.",
        max_tool_calls=1,
        truncation="auto",
        service_tier="default",
        safety_identifier="sid",
        prompt_cache_key="pck",
        top_logprobs=0,
        text={"verbosity": "high"},
        stream_options={"include_obfuscation": False},
        stream=False,
    )

    assert response.status == "completed"
    assert (response.safety_identifier, response.prompt_cache_key) == ("sid", "pck")
    assert response.text is not None
    assert response.text.verbosity == "high"


def test_a_stored_response_of_another_user_cannot_be_continued_with_these_settings(
    client, sdk, outsider, model
):
    model.push(Script(text="Mine."))
    mine = client.responses.create(model="m", input="Hi.")

    with pytest.raises(openai.NotFoundError):
        sdk(outsider).responses.create(
            model="m", input="Hi.", previous_response_id=mine.id, truncation="disabled"
        )


def test_the_clients_own_tool_results_do_not_count_against_max_tool_calls(client, model):
    model.push(
        Script(tool_calls=[("call_w", "get_weather", '{"city": "Paris"}')]),
        Script(tool_calls=[CALC]),
        Script(text="Sunny, and 42."),
    )
    first = client.responses.create(model="m", input="Weather, and 6*7?", tools=[WEATHER])
    answer = [{"type": "function_call_output", "call_id": "call_w", "output": "sunny"}]

    second = client.responses.create(
        model="m", previous_response_id=first.id, input=answer, tools=[WEATHER], max_tool_calls=1
    )

    assert second.status == "completed"
    [output] = [item for item in second.output if item.type == "function_call_output"]
    assert (output.call_id, output.output) == ("call_1", "42")
    assert model.requests[-1].body["tool_choice"] == "none"
