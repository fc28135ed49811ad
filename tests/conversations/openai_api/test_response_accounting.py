"""What a response costs and who may see it: usage recorded per response (the run, its
messages and the daily rollup), the quotas and the one per-user request budget shared
with /api/v1/, metadata kept, input items paged, and another user's response ids
answering 404 on every endpoint, as the SDK sees them."""

import httpx2 as httpx
import openai
import pytest

from conversations.models import Conversation, Message, Run, UsageDay
from tests.support.fake_openai import Script
from tests.support.openai_api import body_of, key_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("worker")]

CALC = ("call_1", "calculator", '{"expression": "6*7"}')


def _usage(prompt: int, completion: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


def test_usage_is_recorded_per_response(client, model, owner):
    conversation = client.conversations.create()
    model.push(
        # The first response calls a server tool: two model calls, their usage summed.
        Script(tool_calls=[CALC], usage=_usage(10, 4)),
        Script(text="42.", usage=_usage(20, 2)),
        Script(text="Bye.", usage=_usage(30, 1)),
    )
    first = client.responses.create(model="m", input="6*7?", conversation=conversation.id)
    second = client.responses.create(model="m", input="Thanks.", conversation=conversation.id)

    assert first.usage is not None
    assert second.usage is not None
    assert (first.usage.input_tokens, first.usage.output_tokens) == (30, 6)
    assert first.usage.total_tokens == 36
    assert (second.usage.input_tokens, second.usage.output_tokens) == (30, 1)
    # The same counts come back from the stored response and from the run's row.
    assert client.responses.retrieve(first.id).usage == first.usage
    runs = {f"resp_{run.pk.hex}": run for run in Run.objects.filter(conversation__owner=owner)}
    assert runs[first.id].usage["total_tokens"] == 36
    assert runs[second.id].usage["total_tokens"] == 31
    # The usage dashboard's daily rollup counts both responses' model calls.
    (day,) = UsageDay.objects.filter(owner=owner)
    assert (day.prompt_tokens, day.completion_tokens, day.total_tokens) == (60, 7, 67)
    stored = Message.objects.filter(conversation__owner=owner, role="assistant")
    assert sum((m.usage or {}).get("total_tokens", 0) for m in stored) == 67


def test_the_daily_message_quota_applies_to_responses(client, model, owner, settings):
    settings.PARLEY_MAX_MESSAGES_PER_DAY = 1
    model.push(Script(text="One."))
    client.responses.create(model="m", input="First.")
    with pytest.raises(openai.RateLimitError) as caught:
        client.responses.create(model="m", input="Second.")
    assert body_of(caught.value)["code"] == "message_quota_exceeded"
    assert caught.value.response.headers["x-should-retry"] == "false"
    assert Run.objects.filter(conversation__owner=owner).count() == 1
    assert Conversation.objects.filter(owner=owner).count() == 1


def test_both_doors_spend_one_request_budget(client, wsgi_app, owner, settings):
    settings.PARLEY_API_THROTTLE_RATE = "2/minute"
    rest = httpx.Client(
        base_url="http://testserver/api/v1",
        transport=wsgi_app,
        headers={"Authorization": f"Bearer {key_for(owner)}"},
    )
    assert rest.get("/conversations/").status_code == 200
    client.models.list()
    with pytest.raises(openai.RateLimitError):
        client.models.list()
    assert rest.get("/conversations/").status_code == 429


def test_metadata_round_trips(client, model):
    model.push(Script(text="Kept."), Script(text="Streamed."))
    metadata = {"ticket": "T-1", "é": "ü 東京"}
    created = client.responses.create(model="m", input="Hi", metadata=metadata)
    assert created.metadata == metadata
    assert client.responses.retrieve(created.id).metadata == metadata
    with client.responses.stream(model="m", input="Hi", metadata={"n": "2"}) as stream:
        events = list(stream)
        final = stream.get_final_response()
    assert events[0].type == "response.created"
    assert events[0].response.metadata == {"n": "2"}
    assert final.metadata == {"n": "2"}
    assert client.responses.retrieve(final.id).metadata == {"n": "2"}


def test_input_items_page_through_what_the_request_stored(client, model):
    model.push(Script(text="Done."))
    given = [{"role": "user", "content": f"part {n}"} for n in range(5)]
    response = client.responses.create(model="m", input=given)

    newest_first = list(client.responses.input_items.list(response.id, limit=2))
    assert [item.content[0].text for item in newest_first] == [
        f"part {n}" for n in range(4, -1, -1)
    ]
    page = client.responses.input_items.list(response.id, limit=2, order="asc")
    assert [item.content[0].text for item in page.data] == ["part 0", "part 1"]
    assert page.has_more is True
    rest = client.responses.input_items.list(response.id, order="asc", after=page.data[-1].id)
    assert [item.content[0].text for item in rest.data] == ["part 2", "part 3", "part 4"]
    assert rest.has_more is False
    # The assistant's reply is the response's output, not its input.
    assert all(item.role == "user" for item in newest_first)


def test_another_users_response_ids_are_not_found_on_every_endpoint(client, sdk, model, outsider):
    model.push(Script(text="Mine."))
    conversation = client.conversations.create()
    response = client.responses.create(model="m", input="Hello", conversation=conversation.id)
    other = sdk(outsider)
    calls = [
        lambda: other.responses.retrieve(response.id, stream=True),
        lambda: other.responses.retrieve(response.id, stream=True, starting_after=1),
        lambda: other.responses.create(model="m", input="x", conversation=conversation.id),
        lambda: other.responses.input_items.list(response.id, after="msg_" + "0" * 32),
        lambda: other.responses.cancel(response.id),
        lambda: other.responses.delete(response.id),
    ]
    for call in calls:
        with pytest.raises(openai.NotFoundError):
            call()
    # Nothing of theirs changed what is mine.
    assert client.responses.retrieve(response.id).status == "completed"
    assert len(list(client.conversations.items.list(conversation.id))) == 2
    assert not Run.objects.filter(conversation__owner=outsider).exists()


def test_the_daily_message_quota_applies_to_responses_kept_nowhere(client, model, owner, settings):
    settings.PARLEY_MAX_MESSAGES_PER_DAY = 1
    model.push(Script(text="One."))
    client.responses.create(model="m", input="First.", store=False)
    asked = len(model.requests)
    for store in (False, True):
        with pytest.raises(openai.RateLimitError) as caught:
            client.responses.create(model="m", input="Second.", store=store)
        assert body_of(caught.value)["code"] == "message_quota_exceeded"
    assert len(model.requests) == asked
    assert not Run.objects.filter(conversation__owner=owner).exists()
