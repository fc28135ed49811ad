"""`POST /responses/compact` and compaction items: the summary comes from one model call
over the previous response's path and the input, nothing is stored, and the item sent
back stands in for the turns it covers in the model's input, the stored turns untouched.
(Every answer is checked against the specification's CompactResource and ItemField by
the suite's autouse check.)"""

import openai
import pytest

from conversations.context import SUMMARY_HEAD
from conversations.engine.compaction import COMPACTION_INSTRUCTIONS, SUMMARY_NOW
from conversations.models import Conversation, Message, Run
from conversations.openai_api import ids
from tests.support.fake_openai import Script
from tests.support.openai_api import body_of

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("worker")]

SUMMARY = "The user has a cat called Tom."


@pytest.fixture
def model(model, monkeypatch: pytest.MonkeyPatch):
    """The fake upstream for compactions too."""
    from conversations.engine import compaction, responses

    monkeypatch.setattr(compaction, "provider_get", responses.provider_get)
    return model


def _counts() -> tuple[int, int, int]:
    return Conversation.objects.count(), Message.objects.count(), Run.objects.count()


def _sent(model) -> list[tuple[str, str]]:
    return [(m["role"], m["content"]) for m in model.requests[-1].body["messages"]]


def _compaction_item(compacted) -> dict:
    item = compacted.output[-1]
    assert item.type == "compaction"
    return {"type": "compaction", "id": item.id, "encrypted_content": item.encrypted_content}


def test_compacting_a_response_summarises_its_path_and_the_input(client, model):
    model.push(Script(text="Noted."), Script(text=SUMMARY, usage=None))
    first = client.responses.create(model="m", input="My cat is Tom.")
    before = _counts()
    compacted = client.responses.compact(
        model="m",
        previous_response_id=first.id,
        input="He is grey.",
        instructions="Keep it short.",
    )
    assert _sent(model) == [
        ("system", COMPACTION_INSTRUCTIONS),
        ("system", "Keep it short."),
        ("user", "My cat is Tom."),
        ("assistant", "Noted."),
        ("user", "He is grey."),
        ("system", SUMMARY_NOW),
    ]
    # No tools: the model is asked for text only.
    assert not model.requests[-1].body.get("tools")
    assert compacted.object == "response.compaction"
    assert compacted.id.startswith("resp_")
    # The user's own words are kept as they were, in order, the compaction item last.
    assert [item.type for item in compacted.output] == ["message", "message", "compaction"]
    assert [item.content[0].text for item in compacted.output[:2]] == [
        "My cat is Tom.",
        "He is grey.",
    ]
    assert compacted.output[0].role == "user"
    assert compacted.output[-1].id.startswith("cmp_")
    assert SUMMARY not in compacted.output[-1].encrypted_content
    assert compacted.usage.total_tokens > 0
    # Nothing is stored, and its id names no response.
    assert _counts() == before
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(compacted.id)


def test_the_summary_sent_back_stands_in_for_the_turns_it_covers(client, model, owner):
    model.push(Script(text="Noted."), Script(text=SUMMARY), Script(text="Grey, I think."))
    first = client.responses.create(model="m", input="My cat is Tom.")
    compacted = client.responses.compact(model="m", previous_response_id=first.id)
    reply = client.responses.create(
        model="m",
        previous_response_id=first.id,
        input=[_compaction_item(compacted), {"role": "user", "content": "What colour is he?"}],
    )
    assert reply.output_text == "Grey, I think."
    assert _sent(model) == [
        ("system", f"{SUMMARY_HEAD}\n{SUMMARY}"),
        ("user", "What colour is he?"),
    ]
    # The conversation keeps every turn, the compaction among them.
    conversation = Conversation.objects.get(owner=owner)
    items = list(client.conversations.items.list(ids.conversation_id(conversation.pk), order="asc"))
    assert [item.type for item in items] == [
        "message",
        "message",
        "compaction",
        "message",
        "message",
    ]
    assert items[2].id.startswith("cmp_")
    # A listed compaction item goes back in as it came out.
    model.push(Script(text="Still Tom."))
    client.responses.create(
        model="m",
        input=[
            {
                "type": "compaction",
                "id": items[2].id,
                "encrypted_content": items[2].encrypted_content,
            },
            {"role": "user", "content": "His name?"},
        ],
    )
    assert _sent(model) == [("system", f"{SUMMARY_HEAD}\n{SUMMARY}"), ("user", "His name?")]


def test_a_fresh_request_with_the_compacted_output_loses_nothing(client, model):
    model.push(Script(text=SUMMARY), Script(text="Tom."))
    answer = client.responses.with_raw_response.compact(
        model="m",
        input=[
            {"role": "user", "content": "My cat is Tom."},
            {"role": "assistant", "content": "Noted."},
            {"role": "user", "content": "He is grey."},
        ],
    )
    # Sent back as the client got it.
    output = answer.http_response.json()["output"]
    client.responses.create(
        model="m", input=[*output, {"role": "user", "content": "What is his name?"}]
    )
    assert _sent(model) == [
        ("user", "My cat is Tom."),
        ("user", "He is grey."),
        ("system", f"{SUMMARY_HEAD}\n{SUMMARY}"),
        ("user", "What is his name?"),
    ]


def test_store_false_and_conversation_items_read_a_compaction_the_same_way(client, model):
    model.push(Script(text="Noted."), Script(text=SUMMARY), Script(text="Grey."))
    first = client.responses.create(model="m", input="My cat is Tom.")
    compacted = client.responses.compact(model="m", previous_response_id=first.id)
    before = _counts()
    client.responses.create(
        model="m",
        store=False,
        previous_response_id=first.id,
        input=[_compaction_item(compacted), {"role": "user", "content": "Colour?"}],
    )
    assert _sent(model) == [("system", f"{SUMMARY_HEAD}\n{SUMMARY}"), ("user", "Colour?")]
    assert _counts() == before
    # Added to the conversation as an item, it covers the same turns.
    conversation = Conversation.objects.get()
    conversation_id = ids.conversation_id(conversation.pk)
    client.conversations.items.create(conversation_id, items=[_compaction_item(compacted)])
    model.push(Script(text="Tom."))
    client.responses.create(model="m", conversation=conversation_id, input="Name?")
    assert _sent(model) == [("system", f"{SUMMARY_HEAD}\n{SUMMARY}"), ("user", "Name?")]


def test_a_compaction_of_the_compacted_context_summarises_the_summary(client, model):
    model.push(Script(text="Noted."), Script(text=SUMMARY), Script(text="Shorter."))
    first = client.responses.create(model="m", input="My cat is Tom.")
    compacted = client.responses.compact(model="m", previous_response_id=first.id)
    again = client.responses.compact(
        model="m",
        previous_response_id=first.id,
        input=[_compaction_item(compacted), {"role": "user", "content": "He is grey."}],
    )
    assert _sent(model)[1:-1] == [
        ("system", f"{SUMMARY_HEAD}\n{SUMMARY}"),
        ("user", "He is grey."),
    ]
    assert [item.content[0].text for item in again.output[:-1]] == ["He is grey."]


# --- refusals -------------------------------------------------------------------------------


def test_another_users_or_an_altered_summary_is_refused_by_its_parameter(
    client, sdk, model, outsider
):
    model.push(Script(text=SUMMARY))
    theirs = sdk(outsider).responses.compact(model="m", input="Their secret.")
    token = theirs.output[-1].encrypted_content
    before = _counts()
    for sent in [token, token[:-6] + "AAAAAA", "not a token", ""]:
        with pytest.raises(openai.BadRequestError) as refused:
            client.responses.create(
                model="m",
                input=[
                    {"role": "user", "content": "Hi."},
                    {"type": "compaction", "encrypted_content": sent},
                ],
            )
        error = body_of(refused.value)
        assert error["param"] == "input[1].encrypted_content"
        assert error["code"] == "invalid_value"
    with pytest.raises(openai.BadRequestError) as refused:
        client.conversations.create(items=[{"type": "compaction", "encrypted_content": token}])
    assert body_of(refused.value)["param"] == "items[0].encrypted_content"
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.compact(
            model="m", input=[{"type": "compaction", "encrypted_content": token}]
        )
    assert body_of(refused.value)["param"] == "input[0].encrypted_content"
    assert _counts() == before


def test_another_users_previous_response_is_not_found(client, sdk, model, outsider):
    model.push(Script(text="Mine."))
    mine = client.responses.create(model="m", input="Hello")
    other = sdk(outsider)
    for previous in [mine.id, "resp_" + "0" * 32, "nonsense"]:
        with pytest.raises(openai.NotFoundError):
            other.responses.compact(model="m", previous_response_id=previous)
    assert len(model.requests) == 1


@pytest.mark.parametrize(
    ("body", "param", "code"),
    [
        ({"input": "Hi"}, "model", "missing_required_parameter"),
        ({"model": "m"}, "input", "missing_required_parameter"),
        ({"model": "m", "input": None, "previous_response_id": None}, "input", None),
        ({"model": "m", "input": "Hi", "store": False}, "store", "unknown_parameter"),
        ({"model": "m", "input": 5}, "input", "invalid_type"),
        ({"model": "m", "input": "Hi", "instructions": 5}, "instructions", "invalid_type"),
        ({"model": "m", "input": "Hi", "prompt_cache_key": "k" * 65}, "prompt_cache_key", None),
    ],
)
def test_a_bad_request_is_refused_and_the_model_not_called(raw, model, body, param, code):
    answer = raw.post("/responses/compact", json=body)
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert error["param"] == param
    if code is not None:
        assert error["code"] == code
    assert model.requests == []


def test_a_failed_model_call_is_an_error_not_an_empty_summary(raw, model):
    model.push(Script.http(400, message="bad prompt"))
    answer = raw.post("/responses/compact", json={"model": "m", "input": "Hi"})
    assert answer.status_code == 502
    error = answer.json()["error"]
    assert error["type"] == "server_error"
    assert error["code"] == "model_call_failed"
    assert "bad prompt" in error["message"]
    model.push(Script(text="  "))
    answer = raw.post("/responses/compact", json={"model": "m", "input": "Hi"})
    assert answer.status_code == 502
