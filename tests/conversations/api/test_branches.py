"""Branches over the REST API: regenerate, edit, switch, list, read a branch's path, fork
and export one, with real runs against the fake upstream. Foreign or unknown ids of any
kind answer 404, and a refused request stores nothing."""

import json
from typing import Any

import pytest
from rest_framework.test import APIClient

from conversations import services
from conversations.models import Branch, Conversation, Message, Run
from tests.support.api import error_of
from tests.support.fake_openai import FakeOpenAI, Script
from tests.support.steps import run_to_end

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("redis_url")]

UNKNOWN = "00000000-0000-4000-8000-000000000000"


# --- helpers ----------------------------------------------------------------------------


def url(conversation: Conversation | str, rest: str = "") -> str:
    key = conversation.pk if isinstance(conversation, Conversation) else conversation
    return f"/api/v1/conversations/{key}/{rest}"


def send(api: APIClient, conversation: Conversation, text: str, **extra: Any) -> dict[str, Any]:
    response = api.post(url(conversation, "messages/"), {"content": text, **extra}, format="json")
    assert response.status_code == 202, response.content
    body: dict[str, Any] = response.json()
    return body


def ask(api, conversation, text: str, reply: str, model: FakeOpenAI, enqueued) -> None:
    model.push(Script(text=reply))
    run_to_end(send(api, conversation, text)["run"]["id"], enqueued)


def messages(api: APIClient, conversation: Conversation, **query: str) -> list[dict[str, Any]]:
    response = api.get(url(conversation, "messages/"), {"limit": "200", **query})
    assert response.status_code == 200, response.content
    rows: list[dict[str, Any]] = response.json()["results"]
    return rows


def texts(rows: list[dict[str, Any]]) -> list[str]:
    return [row["content"] for row in rows]


def counts(conversation: Conversation) -> tuple[int, int, int]:
    """Messages, branches and runs: unchanged after a refused request."""
    return (
        Message.objects.filter(conversation=conversation).count(),
        Branch.objects.filter(conversation=conversation).count(),
        Run.objects.filter(conversation=conversation).count(),
    )


@pytest.fixture
def model(upstream: FakeOpenAI) -> FakeOpenAI:
    return upstream


@pytest.fixture
def chatted(api, conversation, model, enqueued) -> Conversation:
    """Two finished turns: u1 a2 u3 a4, on the root branch."""
    ask(api, conversation, "What is a cat?", "A small feline.", model, enqueued)
    ask(api, conversation, "And a dog?", "A loyal canine.", model, enqueued)
    conversation.refresh_from_db()
    return conversation


def message_at(conversation: Conversation, seq: int, branch_id: Any = None) -> Message:
    branch = branch_id or Branch.objects.get(conversation=conversation, parent__isnull=True).pk
    return Message.objects.get(conversation=conversation, branch_id=branch, seq=seq)


def regenerate(api, conversation, message: Message | str, **body: Any) -> Any:
    key = message.pk if isinstance(message, Message) else message
    return api.post(url(conversation, f"messages/{key}/regenerate/"), body, format="json")


def edit(api, conversation, message: Message | str, body: Any, **headers: Any) -> Any:
    key = message.pk if isinstance(message, Message) else message
    return api.post(url(conversation, f"messages/{key}/edit/"), body, format="json", **headers)


# --- regenerate -------------------------------------------------------------------------


def test_regenerate_makes_a_second_version_both_pages_show(api, chatted, model, enqueued):
    root = str(chatted.active_branch_id)
    old_reply = message_at(chatted, 4)
    model.push(Script(text="A domesticated wolf."))

    response = regenerate(api, chatted, old_reply)

    assert response.status_code == 202, response.content
    body = response.json()
    branch, run = body["branch"], body["run"]
    assert body["message"] is None
    assert (branch["parent_id"], branch["fork_seq"], branch["message_count"]) == (root, 3, 3)
    assert run["branch_id"] == branch["id"]
    assert run["trigger_message_id"] == str(message_at(chatted, 3).pk)
    assert run_to_end(run["id"], enqueued).status == "completed"

    new_path = messages(api, chatted)
    assert texts(new_path) == [
        "What is a cat?",
        "A small feline.",
        "And a dog?",
        "A domesticated wolf.",
    ]
    versions = {"count": 2, "branch_ids": [root, branch["id"]]}
    assert new_path[3]["alternatives"] == {"index": 1, **versions}
    assert new_path[3]["branch_id"] == branch["id"]
    assert [row["alternatives"] for row in new_path[:3]] == [None, None, None]
    assert [row["branch_id"] for row in new_path[:3]] == [root] * 3

    old_path = messages(api, chatted, branch_id=root)
    assert texts(old_path)[3] == "A loyal canine."
    assert old_path[3]["alternatives"] == {"index": 0, **versions}

    chatted.refresh_from_db()
    shown = api.get(url(chatted)).json()
    assert (shown["active_branch_id"], shown["branch_count"]) == (branch["id"], 2)
    # The model was asked the same question again, without the old answer.
    sent = [m["content"] for m in model.requests[-1].messages if m["role"] != "system"]
    assert sent == ["What is a cat?", "A small feline.", "And a dog?"]


def test_only_an_assistant_reply_can_be_regenerated(api, chatted):
    before = counts(chatted)
    response = regenerate(api, chatted, message_at(chatted, 3))
    assert response.status_code == 400
    error = error_of(response)
    assert error["code"] == "invalid"
    assert error["details"]["problems"][0]["path"] == "$.message_id"
    assert "assistant" in error["message"]
    assert counts(chatted) == before


def test_a_repeat_with_the_idempotency_key_answers_the_same_run(api, chatted):
    reply = message_at(chatted, 4)
    headers = {"HTTP_IDEMPOTENCY_KEY": "regen-1"}
    first = api.post(url(chatted, f"messages/{reply.pk}/regenerate/"), {}, format="json", **headers)
    again = api.post(url(chatted, f"messages/{reply.pk}/regenerate/"), {}, format="json", **headers)
    assert first.status_code == again.status_code == 202
    assert again["Idempotent-Replayed"] == "true"
    assert again.json()["run"]["id"] == first.json()["run"]["id"]
    assert Branch.objects.filter(conversation=chatted).count() == 2
    assert Run.objects.filter(conversation=chatted).count() == 3


def test_a_repeat_with_the_client_id_answers_the_same_run(api, chatted, model, enqueued):
    reply = message_at(chatted, 4)
    first = regenerate(api, chatted, reply, client_id="again-1").json()
    model.push(Script(text="A wolf."))
    run_to_end(first["run"]["id"], enqueued)  # even once it has finished
    again = regenerate(api, chatted, reply, client_id="again-1")
    assert again.status_code == 202
    assert (again.json()["run"]["id"], again.json()["branch"]["id"]) == (
        first["run"]["id"],
        first["branch"]["id"],
    )
    assert Branch.objects.filter(conversation=chatted).count() == 2


# --- edit ---------------------------------------------------------------------------


def test_edit_forks_before_the_message_and_keeps_what_came_before(api, chatted, model, enqueued):
    root = str(chatted.active_branch_id)
    model.push(Script(text="A loyal wolf, tamed."))

    response = edit(api, chatted, message_at(chatted, 3), {"content": "And a wolf?"})

    assert response.status_code == 202, response.content
    body = response.json()
    branch, message = body["branch"], body["message"]
    assert (branch["parent_id"], branch["fork_seq"]) == (root, 2)
    assert (message["content"], message["seq"], message["branch_id"]) == (
        "And a wolf?",
        3,
        branch["id"],
    )
    assert message["alternatives"] == {"index": 1, "count": 2, "branch_ids": [root, branch["id"]]}
    assert body["run"]["trigger_message_id"] == message["id"]
    run_to_end(body["run"]["id"], enqueued)

    path = messages(api, chatted)
    assert texts(path) == [
        "What is a cat?",
        "A small feline.",
        "And a wolf?",
        "A loyal wolf, tamed.",
    ]
    assert path[2]["alternatives"]["index"] == 1
    assert texts(messages(api, chatted, branch_id=root))[2:] == ["And a dog?", "A loyal canine."]


def test_edit_content_is_checked_like_a_message_and_nothing_is_stored(api, chatted, settings):
    settings.PARLEY_MAX_MESSAGE_CHARS = 10
    user_message = message_at(chatted, 3)
    before = counts(chatted)
    cases: list[tuple[dict[str, Any], str]] = [
        ({"content": ""}, "$.content"),
        ({"content": "   "}, "$.content"),
        ({"content": "x" * 11}, "$.content"),
        ({}, "$.content"),
        ({"content": 5}, "$.content"),
        ({"content": "ok", "client_id": 7}, "$.client_id"),
        ({"content": "ok", "branch_id": UNKNOWN}, "$.branch_id"),
    ]
    for body, path in cases:
        response = edit(api, chatted, user_message, body)
        assert response.status_code == 400, (body, response.content)
        assert error_of(response)["details"]["problems"][0]["path"] == path
        # The same answer as sending a message with that content.
        if set(body) == {"content"} and isinstance(body["content"], str):
            sent = api.post(url(chatted, "messages/"), body, format="json")
            assert (sent.status_code, error_of(sent)) == (400, error_of(response))
    assert counts(chatted) == before


def test_only_a_user_message_can_be_edited(api, chatted):
    before = counts(chatted)
    response = edit(api, chatted, message_at(chatted, 4), {"content": "Rewritten"})
    assert response.status_code == 400
    assert error_of(response)["details"]["problems"][0]["path"] == "$.message_id"
    assert counts(chatted) == before


def test_an_edit_repeated_with_its_idempotency_key_makes_one_branch(api, chatted):
    user_message = message_at(chatted, 1)
    headers = {"HTTP_IDEMPOTENCY_KEY": "edit-1"}
    first = edit(api, chatted, user_message, {"content": "What is a lion?"}, **headers)
    again = edit(api, chatted, user_message, {"content": "What is a lion?"}, **headers)
    assert first.status_code == again.status_code == 202
    assert again.json() == first.json()
    assert first.json()["branch"]["fork_seq"] == 0  # the first message: forked at 0
    assert Branch.objects.filter(conversation=chatted).count() == 2
    assert Message.objects.filter(conversation=chatted, content="What is a lion?").count() == 1


# --- while a run is active ------------------------------------------------------------


def test_while_a_run_is_active_regenerate_edit_and_switch_are_409(api, chatted):
    root = str(chatted.active_branch_id)
    regenerated = regenerate(api, chatted, message_at(chatted, 4)).json()  # queued: active
    before = counts(chatted)

    for response in [
        regenerate(api, chatted, message_at(chatted, 2)),
        edit(api, chatted, message_at(chatted, 1), {"content": "Hi"}),
        api.patch(url(chatted), {"active_branch_id": root}, format="json"),
    ]:
        assert response.status_code == 409, response.content
        assert error_of(response)["code"] == "run_active"
    assert counts(chatted) == before
    chatted.refresh_from_db()
    assert str(chatted.active_branch_id) == regenerated["branch"]["id"]


# --- switch, list, read a branch --------------------------------------------------------


def test_switching_with_patch_changes_which_path_messages_returns(api, chatted, model, enqueued):
    root = str(chatted.active_branch_id)
    model.push(Script(text="A wolf."))
    regenerated = regenerate(api, chatted, message_at(chatted, 4)).json()
    run_to_end(regenerated["run"]["id"], enqueued)
    assert texts(messages(api, chatted))[-1] == "A wolf."

    response = api.patch(url(chatted), {"active_branch_id": root}, format="json")
    assert response.status_code == 200, response.content
    assert response.json()["active_branch_id"] == root
    assert texts(messages(api, chatted))[-1] == "A loyal canine."

    both = api.patch(
        url(chatted),
        {"active_branch_id": regenerated["branch"]["id"], "title": "Pets"},
        format="json",
    )
    assert (both.json()["active_branch_id"], both.json()["title"]) == (
        regenerated["branch"]["id"],
        "Pets",
    )
    assert texts(messages(api, chatted))[-1] == "A wolf."

    # A new message goes where the user is looking.
    model.push(Script(text="Yes."))
    sent = send(api, chatted, "Really?")
    assert (sent["message"]["seq"], sent["message"]["branch_id"]) == (
        5,
        regenerated["branch"]["id"],
    )


def test_a_refused_switch_changes_nothing_else(api, chatted, owner):
    other = services.conversation_create(owner=owner, title="Other")
    for value, status in [
        (str(other.active_branch_id), 404),  # the user's own other conversation's branch
        (UNKNOWN, 404),
        ("not-a-uuid", 400),
        (5, 400),
        (None, 400),
    ]:
        response = api.patch(
            url(chatted), {"active_branch_id": value, "title": "Changed"}, format="json"
        )
        assert response.status_code == status, (value, response.content)
        if status == 404:
            assert error_of(response)["code"] == "not_found"
        else:
            assert error_of(response)["details"]["problems"][0]["path"] == "$.active_branch_id"
    chatted.refresh_from_db()
    assert chatted.title == "Cats"


def test_posting_on_a_named_branch_makes_it_active(api, chatted, model, enqueued):
    root = str(chatted.active_branch_id)
    model.push(Script(text="A wolf."))
    regenerated = regenerate(api, chatted, message_at(chatted, 4)).json()
    run_to_end(regenerated["run"]["id"], enqueued)

    sent = send(api, chatted, "Back to dogs", branch_id=root)
    assert (sent["message"]["branch_id"], sent["message"]["seq"]) == (root, 5)
    assert sent["run"]["branch_id"] == root
    chatted.refresh_from_db()
    assert str(chatted.active_branch_id) == root
    assert texts(messages(api, chatted))[3:] == ["A loyal canine.", "Back to dogs"]


def test_the_branch_list_is_root_first_then_by_creation_a_page_at_a_time(api, chatted):
    root = str(chatted.active_branch_id)
    made = []
    for seq in (4, 2):
        made.append(regenerate(api, chatted, message_at(chatted, seq)).json()["branch"])
        Run.objects.filter(conversation=chatted).update(status="cancelled")
    made.append(edit(api, chatted, message_at(chatted, 1), {"content": "Hello"}).json()["branch"])

    whole = api.get(url(chatted, "branches/")).json()
    assert whole["next"] is None
    assert [b["id"] for b in whole["results"]] == [root] + [b["id"] for b in made]
    assert whole["results"][0] == {
        "id": root,
        "parent_id": None,
        "fork_seq": 0,
        "created_at": whole["results"][0]["created_at"],
        "message_count": 4,
    }
    assert [(b["fork_seq"], b["message_count"]) for b in whole["results"][1:]] == [
        (3, 3),
        (1, 1),
        (0, 1),
    ]

    seen, link = [], url(chatted, "branches/?limit=1")
    while link:
        page = api.get(link).json()
        assert len(page["results"]) == 1
        seen += page["results"]
        link = page["next"]
    assert seen == whole["results"]

    assert api.get(url(chatted, "branches/?limit=0")).status_code == 400
    bad_cursor = api.get(url(chatted, "branches/?cursor=nope"))
    assert bad_cursor.status_code == 400
    assert error_of(bad_cursor)["details"]["problems"][0]["path"] == "$.cursor"


# --- foreign and unknown ids ----------------------------------------------------------------


def test_another_users_branch_or_conversation_is_404(api, chatted, outsider, as_user):
    theirs = services.conversation_create(owner=outsider, title="Theirs")
    services.user_message_append(conversation=theirs, content="their secret")
    for query in [str(theirs.active_branch_id), UNKNOWN, "nope", "1"]:
        response = api.get(url(chatted, "messages/"), {"branch_id": query})
        assert response.status_code == 404, query
        assert error_of(response)["code"] == "not_found"
    # And the other way round: our branch ids mean nothing in their hands.
    outsider_api = as_user(outsider)
    mine = str(chatted.active_branch_id)
    for path in ["messages/", "branches/"]:
        assert outsider_api.get(url(chatted, path), {"branch_id": mine}).status_code == 404
    refused = outsider_api.get(url(theirs, "messages/"), {"branch_id": mine})
    assert refused.status_code == 404
    assert b"swordfish" not in refused.content


def test_a_message_of_another_conversation_is_404_even_the_users_own(api, chatted, owner, outsider):
    own_other = services.conversation_create(owner=owner, title="Other")
    services.messages_append(
        conversation=own_other,
        messages=[
            services.NewMessage(role="user", content="hi"),
            services.NewMessage(role="assistant", content="hello"),
        ],
    )
    theirs = services.conversation_create(owner=outsider)
    services.messages_append(
        conversation=theirs,
        messages=[
            services.NewMessage(role="user", content="hi"),
            services.NewMessage(role="assistant", content="hello"),
        ],
    )
    before = counts(chatted)
    for other in (own_other, theirs):
        user_message = message_at(other, 1, other.active_branch_id)
        reply = message_at(other, 2, other.active_branch_id)
        for response in [
            regenerate(api, chatted, reply),
            edit(api, chatted, user_message, {"content": "Edited"}),
        ]:
            assert response.status_code == 404
            assert error_of(response)["code"] == "not_found"
    for key in [UNKNOWN, "nope", "1"]:
        assert regenerate(api, chatted, key).status_code == 404
        assert edit(api, chatted, key, {"content": "Edited"}).status_code == 404
    # Their conversation in the path: 404 whoever's message it names.
    assert regenerate(api, theirs, message_at(chatted, 4)).status_code == 404
    assert counts(chatted) == before
    assert counts(own_other) == (2, 1, 0)


def test_a_body_branch_id_that_is_not_theirs_is_404_and_a_wrong_type_400(api, chatted, owner):
    other = services.conversation_create(owner=owner, title="Other")
    before = counts(chatted)
    for body, status in [
        ({"content": "Hi", "branch_id": str(other.active_branch_id)}, 404),
        ({"content": "Hi", "branch_id": UNKNOWN}, 404),
        ({"content": "Hi", "branch_id": 5}, 400),
        ({"content": "Hi", "branch_id": "nope"}, 400),
    ]:
        response = api.post(url(chatted, "messages/"), body, format="json")
        assert response.status_code == status, (body, response.content)
        if status == 400:
            assert error_of(response)["details"]["problems"][0]["path"] == "$.branch_id"
    for body, status in [
        ({"at_seq": 1, "branch_id": str(other.active_branch_id)}, 404),
        ({"at_seq": 1, "branch_id": 5}, 400),
    ]:
        assert api.post(url(chatted, "fork/"), body, format="json").status_code == status
    assert counts(chatted) == before
    assert Conversation.objects.filter(owner=owner).count() == 2


# --- fork and export ------------------------------------------------------------------------


def test_fork_with_a_branch_copies_that_path(api, chatted, model, enqueued):
    root = str(chatted.active_branch_id)
    model.push(Script(text="A wolf."))
    regenerated = regenerate(api, chatted, message_at(chatted, 4)).json()
    run_to_end(regenerated["run"]["id"], enqueued)

    for branch_id, last in [(root, "A loyal canine."), (regenerated["branch"]["id"], "A wolf.")]:
        response = api.post(
            url(chatted, "fork/"), {"at_seq": 4, "branch_id": branch_id}, format="json"
        )
        assert response.status_code == 201, response.content
        fork = Conversation.objects.get(pk=response.json()["id"])
        assert texts(messages(api, fork)) == [
            "What is a cat?",
            "A small feline.",
            "And a dog?",
            last,
        ]
        assert fork.branch_count == 1
    # Without a branch: the active one (the regenerated reply).
    default = api.post(url(chatted, "fork/"), {"at_seq": 4}, format="json").json()
    assert texts(messages(api, Conversation.objects.get(pk=default["id"])))[-1] == "A wolf."


def export(api: APIClient, conversation: Conversation, query: str = "") -> Any:
    return api.get(url(conversation, f"export/?format=json{query}"))


def test_export_has_every_branch_and_version_1_the_active_path(api, chatted, model, enqueued):
    root = str(chatted.active_branch_id)
    model.push(Script(text="A wolf."))
    regenerated = regenerate(api, chatted, message_at(chatted, 4)).json()
    run_to_end(regenerated["run"]["id"], enqueued)
    new = regenerated["branch"]["id"]

    document = json.loads(b"".join(export(api, chatted).streaming_content))
    assert document["version"] == 2
    assert [b["id"] for b in document["branches"]] == [root, new]
    assert document["conversation"]["active_branch_id"] == new
    assert {m["branch_id"] for m in document["messages"]} == {root, new}
    assert len(document["messages"]) == 5

    raw = b"".join(export(api, chatted, "&version=1").streaming_content)
    first = json.loads(raw)
    assert first["version"] == 1
    assert "branches" not in first
    assert [m["content"] for m in first["messages"]] == texts(messages(api, chatted))
    assert [m["seq"] for m in first["messages"]] == [1, 2, 3, 4]

    imported = api.post("/api/v1/conversations/import/", raw, content_type="application/json")
    assert imported.status_code == 201, imported.content
    copy = Conversation.objects.get(pk=imported.json()["id"])
    assert texts(messages(api, copy))[-1] == "A wolf."
    assert copy.branch_count == 1

    for query in ["&version=3", "&version=", "&version=v1"]:
        refused = export(api, chatted, query)
        assert refused.status_code == 400, query
        assert error_of(refused)["details"]["problems"][0]["path"] == "$.query.version"


# --- the schema says so ---------------------------------------------------------------------


def test_the_schema_declares_the_branch_fields():
    import yaml

    schema = yaml.safe_load(APIClient().get("/api/schema/").content)
    components = schema["components"]["schemas"]
    assert {"branch_id", "alternatives"} <= set(components["MessageOut"]["properties"])
    assert set(components["AlternativesOut"]["properties"]) == {"index", "count", "branch_ids"}
    assert "branch_id" in components["RunOut"]["properties"]
    assert {"active_branch_id", "branch_count"} <= set(components["ConversationOut"]["properties"])
    assert set(components["BranchOut"]["properties"]) == {
        "id",
        "parent_id",
        "fork_seq",
        "created_at",
        "message_count",
    }
    paths = schema["paths"]
    messages_path = paths["/api/v1/conversations/{conversation_id}/messages/"]
    assert "branch_id" in [p["name"] for p in messages_path["get"]["parameters"]]
    export_get = paths["/api/v1/conversations/{conversation_id}/export/"]["get"]
    assert "version" in [p["name"] for p in export_get["parameters"]]
    assert "version 1)" not in export_get["description"]
    for action in ("regenerate", "edit"):
        operation = paths[
            f"/api/v1/conversations/{{conversation_id}}/messages/{{message_id}}/{action}/"
        ]
        assert operation["post"]["requestBody"]["content"]["application/json"]["examples"]


def test_regenerate_past_the_daily_message_quota_is_a_429_and_stores_nothing(
    api, chatted, model, enqueued, settings
):
    settings.PARLEY_MAX_MESSAGES_PER_DAY = 1  # set after the two questions: counts from here
    model.push(Script(text="A domesticated wolf."))
    first = regenerate(api, chatted, message_at(chatted, 4))
    assert first.status_code == 202
    run_to_end(first.json()["run"]["id"], enqueued)
    before = counts(chatted)
    response = regenerate(api, chatted, message_at(chatted, 4))
    assert response.status_code == 429
    assert error_of(response)["code"] == "message_quota_exceeded"
    assert counts(chatted) == before
