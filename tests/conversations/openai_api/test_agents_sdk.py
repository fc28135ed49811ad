"""The OpenAI Agents SDK (`openai-agents`) as a user would run it against Parley: an
`AsyncOpenAI` client with a Parley API key pointed at a live server's /openai/v1, the
Responses model, tracing off. The fake upstream model answers; what it was sent shows
what the agent's turns carried."""

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import openai
import pytest
from agents import (
    Agent,
    ModelRetrySettings,
    ModelSettings,
    OpenAIConversationsSession,
    OpenAIResponsesModel,
    Runner,
    function_tool,
    set_tracing_disabled,
)
from openai import AsyncOpenAI

from tests.support.fake_openai import FakeOpenAI, Script
from tests.support.openai_api import key_for
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("worker")]


@pytest.fixture
def api_key(owner) -> str:
    return key_for(owner)


@pytest.fixture
async def parley(live_server, api_key: str) -> AsyncIterator[AsyncOpenAI]:
    """The client a user of the SDK makes: Parley's address and a Parley API key, the
    SDK's default retries."""
    set_tracing_disabled(True)
    client = AsyncOpenAI(base_url=f"{live_server.url}/openai/v1", api_key=api_key)
    yield client
    await client.close()


def agent_of(client: AsyncOpenAI, **settings: Any) -> Agent:
    return Agent(
        name="Assistant",
        instructions="Answer briefly.",
        model=OpenAIResponsesModel(model="m", openai_client=client),
        model_settings=ModelSettings(**settings),
    )


def texts(items: list[Any]) -> list[tuple[str, str]]:
    """(role, text) of the message items, in order."""
    return [
        (item["role"], "".join(part.get("text", "") for part in item["content"]))
        for item in items
        if item.get("type", "message") == "message"
    ]


def sent_to_model(request: Any) -> list[tuple[str, str]]:
    """(role, text) of what a request to the upstream model carried, the instructions left
    out."""
    return [
        (message["role"], message.get("content") or "")
        for message in request.messages
        if message["role"] != "system"
    ]


async def test_a_session_keeps_added_items_in_order_and_pops_and_clears(parley):
    session = OpenAIConversationsSession(openai_client=parley)
    await session.add_items(
        [
            {"role": "user", "content": "Where is Oslo?"},
            {"role": "assistant", "content": "In Norway."},
            {"role": "user", "content": "And Bergen?"},
        ]
    )
    conversation_id = session.session_id
    assert conversation_id.startswith("conv_")
    every: list[Any] = await session.get_items()
    assert texts(every) == [
        ("user", "Where is Oslo?"),
        ("assistant", "In Norway."),
        ("user", "And Bergen?"),
    ]
    # With a limit the session reads newest first and gives the latest, oldest first.
    assert texts(await session.get_items(limit=2)) == texts(every)[1:]

    popped = await session.pop_item()
    assert popped is not None
    assert texts([popped]) == [("user", "And Bergen?")]
    assert texts(await session.get_items()) == texts(every)[:2]
    # Parley itself no longer lists it.
    listed = [item async for item in parley.conversations.items.list(conversation_id)]
    assert [item.id for item in listed] == [item["id"] for item in reversed(every[:2])]

    await session.clear_session()
    with pytest.raises(openai.NotFoundError):
        await parley.conversations.retrieve(conversation_id)


async def test_a_session_carries_the_first_turn_into_the_second(parley, model: FakeOpenAI):
    model.push(Script(text="Hello Ada."), Script(text="Your name is Ada."))
    agent = agent_of(parley)
    session = OpenAIConversationsSession(openai_client=parley)

    first = await Runner.run(agent, "Hi, I am Ada.", session=session)
    second = await Runner.run(agent, "What is my name?", session=session)

    assert first.final_output == "Hello Ada."
    assert second.final_output == "Your name is Ada."
    assert sent_to_model(model.requests[1]) == [
        ("user", "Hi, I am Ada."),
        ("assistant", "Hello Ada."),
        ("user", "What is my name?"),
    ]
    assert texts(await session.get_items()) == [
        ("user", "Hi, I am Ada."),
        ("assistant", "Hello Ada."),
        ("user", "What is my name?"),
        ("assistant", "Your name is Ada."),
    ]


async def test_a_function_tool_round_trip(parley, model: FakeOpenAI):
    ran: list[str] = []

    @function_tool
    def get_weather(city: str) -> str:
        """The weather now in a city."""
        ran.append(city)
        return f"Sunny in {city}, 21 degrees."

    model.push(
        Script(tool_calls=[("call_w1", "get_weather", '{"city": "Oslo"}')]),
        Script(text="It is sunny in Oslo."),
    )
    agent = agent_of(parley).clone(tools=[get_weather])

    result = await Runner.run(agent, "What is the weather in Oslo?")

    assert ran == ["Oslo"]
    assert result.final_output == "It is sunny in Oslo."
    # Offered to the model beside Parley's own tools.
    offered = [tool["function"]["name"] for tool in model.requests[0].body["tools"]]
    assert "get_weather" in offered
    # The tool's output reached the model, answering the call it made.
    answered = [m for m in model.requests[1].messages if m["role"] == "tool"]
    assert [(m["tool_call_id"], m["content"]) for m in answered] == [
        ("call_w1", "Sunny in Oslo, 21 degrees.")
    ]


async def test_previous_response_id_chains_two_runs(parley, model: FakeOpenAI):
    model.push(Script(text="Noted, Ada."), Script(text="You are Ada."))
    agent = agent_of(parley)

    first = await Runner.run(agent, "My name is Ada.")
    second = await Runner.run(agent, "Who am I?", previous_response_id=first.last_response_id)

    assert second.final_output == "You are Ada."
    assert sent_to_model(model.requests[1]) == [
        ("user", "My name is Ada."),
        ("assistant", "Noted, Ada."),
        ("user", "Who am I?"),
    ]
    stored = await parley.responses.retrieve(second.last_response_id or "")
    assert stored.previous_response_id == first.last_response_id
    assert stored.output_text == "You are Ada."


async def test_a_streamed_run_delivers_its_text_as_it_comes(parley, model: FakeOpenAI):
    model.push(Script(text="Streaming through the agent."))
    result = Runner.run_streamed(agent_of(parley), "Stream, please.")
    deltas = [
        event.data.delta
        async for event in result.stream_events()
        if event.type == "raw_response_event" and event.data.type == "response.output_text.delta"
    ]
    assert len(deltas) > 1
    assert "".join(deltas) == result.final_output == "Streaming through the agent."


async def _first_turn_in_flight(
    parley: AsyncOpenAI, model: FakeOpenAI, conversation_id: str
) -> "asyncio.Task[Any]":
    """A first turn on the conversation whose reply is still on its way."""
    model.push(Script(text="First answer.", first_token_delay=1.5))
    first = asyncio.create_task(
        Runner.run(agent_of(parley), "First question.", conversation_id=conversation_id)
    )
    await asyncio.to_thread(
        wait_until, lambda: len(model.requests) == 1, timeout=10, what="the first turn's call"
    )
    return first


async def test_a_second_turn_while_one_is_in_flight_is_refused_as_locked(parley, model: FakeOpenAI):
    conversation = await parley.conversations.create()
    first = await _first_turn_in_flight(parley, model, conversation.id)
    # Retries turned off: the SDK hands the refusal over at once.
    impatient = agent_of(parley, retry=ModelRetrySettings(max_retries=0))

    with pytest.raises(openai.BadRequestError) as caught:
        await Runner.run(impatient, "Second question.", conversation_id=conversation.id)

    assert caught.value.code == "conversation_locked"
    assert (await first).final_output == "First answer."
    assert len(model.requests) == 1  # the refused turn never reached the model


async def test_the_sdk_waits_out_a_locked_conversation(parley, model: FakeOpenAI):
    """The SDK retries `conversation_locked` (a second apart, then longer) by default: a
    turn sent while another runs goes through once that one has ended."""
    conversation = await parley.conversations.create()
    first = await _first_turn_in_flight(parley, model, conversation.id)
    model.push(Script(text="Second answer."))

    second = await Runner.run(agent_of(parley), "Second question.", conversation_id=conversation.id)

    assert (await first).final_output == "First answer."
    assert second.final_output == "Second answer."
    assert sent_to_model(model.requests[1]) == [
        ("user", "First question."),
        ("assistant", "First answer."),
        ("user", "Second question."),
    ]
    items = [item async for item in parley.conversations.items.list(conversation.id, order="asc")]
    assert [item.content[0].text for item in items] == [
        "First question.",
        "First answer.",
        "Second question.",
        "Second answer.",
    ]
