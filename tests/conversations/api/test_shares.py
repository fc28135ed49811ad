"""Share links over the REST API: the owner makes, lists and revokes them; whoever holds
a link reads its snapshot (and nothing of the owner), a signed-in reader continues it in
their own account. Unknown, revoked and expired links are 404 alike."""

import hashlib
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from conversations import services
from conversations.models import Conversation, Message, Share
from conversations.services import NewMessage
from tests.support.api import error_of
from tests.support.shares import SECRET_DRAFT, SECRET_PROMPT, chat_to_share

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("redis_url")]

UNKNOWN = "00000000-0000-4000-8000-000000000000"


@pytest.fixture
def chat(owner) -> Conversation:
    return chat_to_share(owner)


def share(api: APIClient, conversation: Conversation, **body: Any) -> dict[str, Any]:
    response = api.post(f"/api/v1/conversations/{conversation.pk}/shares/", body, format="json")
    assert response.status_code == 201, response.content
    answer: dict[str, Any] = response.json()
    return answer


def token_of(created: dict[str, Any]) -> str:
    url: str = created["url"]
    assert url.startswith("/s/")
    assert url.endswith("/")
    return url[len("/s/") : -1]


def read(client: APIClient, token: str) -> Any:
    return client.get(f"/api/v1/shared/{token}/")


def test_the_owner_shares_and_anyone_reads_the_snapshot(api, chat):
    created = share(api, chat)
    assert created["audience"] == "public"
    assert created["message_count"] == 2
    assert created["view_count"] == 0
    assert created["expires_at"] is None

    response = read(APIClient(), token_of(created))

    assert response.status_code == 200, response.content
    body = response.json()
    assert set(body) == {"title", "created_at", "messages"}
    assert body["title"] == "Cats"
    assert [m["content"] for m in body["messages"]] == ["Why do cats purr?", "Mostly contentment."]


def test_only_the_token_hash_is_stored(api, chat):
    token = token_of(share(api, chat))

    stored = Share.objects.get()
    assert stored.token_hash == hashlib.sha256(token.encode()).hexdigest()
    assert token not in str(Share.objects.values().get())


def test_nothing_of_the_owner_is_in_the_shared_answer(api, chat, owner):
    owner.email = "alice@example.com"
    owner.save()
    token = token_of(share(api, chat))

    text = read(APIClient(), token).content.decode()

    for secret in (owner.username, owner.email, SECRET_PROMPT, SECRET_DRAFT):
        assert secret not in text
    assert f'"{owner.pk}"' not in text
    assert f": {owner.pk}," not in text


def test_a_message_added_after_sharing_does_not_show(api, chat):
    token = token_of(share(api, chat))
    services.message_append(conversation=chat, message=NewMessage(role="user", content="More?"))

    messages = read(APIClient(), token).json()["messages"]

    assert [m["content"] for m in messages] == ["Why do cats purr?", "Mostly contentment."]


def test_a_branch_switch_does_not_change_the_snapshot(api, chat):
    token = token_of(share(api, chat))
    active = chat.active_branch
    other = services.branch_fork(conversation=chat, source=active, fork_seq=1)
    services.message_append(
        conversation=chat, message=NewMessage(role="assistant", content="Other"), branch_id=other.pk
    )
    services.branch_switch(conversation=chat, branch_id=other.pk)

    messages = read(APIClient(), token).json()["messages"]

    assert [m["content"] for m in messages] == ["Why do cats purr?", "Mostly contentment."]


def test_each_read_counts_a_view(api, chat):
    token = token_of(share(api, chat))
    read(APIClient(), token)
    read(APIClient(), token)

    listed = api.get(f"/api/v1/conversations/{chat.pk}/shares/").json()["results"]

    assert [s["view_count"] for s in listed] == [2]


def test_revoked_expired_and_unknown_links_answer_the_same_404(api, chat):
    revoked = token_of(share(api, chat))
    expiring = token_of(
        share(api, chat, expires_at=(timezone.now() + timedelta(hours=1)).isoformat())
    )
    assert (
        api.delete(f"/api/v1/shares/{Share.objects.order_by('created_at')[0].pk}/").status_code
        == 204
    )
    Share.objects.filter(expires_at__isnull=False).update(
        expires_at=timezone.now() - timedelta(seconds=1)
    )

    answers = [read(APIClient(), token) for token in (revoked, expiring, "no-such-token")]

    assert [a.status_code for a in answers] == [404, 404, 404]
    assert len({a.content for a in answers}) == 1
    assert error_of(answers[0])["code"] == "not_found"


def test_a_past_expiry_is_refused_and_stores_nothing(api, chat):
    past = (timezone.now() - timedelta(minutes=1)).isoformat()

    response = api.post(
        f"/api/v1/conversations/{chat.pk}/shares/", {"expires_at": past}, format="json"
    )

    assert response.status_code == 400
    assert "expires_at" in response.content.decode()
    assert not Share.objects.exists()


def test_an_unknown_audience_is_refused_and_stores_nothing(api, chat):
    response = api.post(
        f"/api/v1/conversations/{chat.pk}/shares/", {"audience": "everyone"}, format="json"
    )

    assert response.status_code == 400
    assert not Share.objects.exists()


def test_a_signed_in_link_asks_anonymous_readers_to_log_in(api, chat, outsider, as_user):
    token = token_of(share(api, chat, audience="signed_in"))

    anonymous = read(APIClient(), token)
    signed_in = read(as_user(outsider), token)

    assert anonymous.status_code == 401
    assert error_of(anonymous)["code"] == "not_authenticated"
    assert signed_in.status_code == 200
    assert Share.objects.get().view_count == 1


def test_the_owner_lists_shares_per_conversation_and_all(api, chat, owner):
    other = services.conversation_create(owner=owner, title="Dogs")
    first = share(api, chat)
    second = share(api, other)

    of_chat = api.get(f"/api/v1/conversations/{chat.pk}/shares/").json()
    every = api.get("/api/v1/shares/").json()

    assert [s["id"] for s in of_chat["results"]] == [first["id"]]
    assert [s["id"] for s in every["results"]] == [second["id"], first["id"]]
    assert every["next"] is None
    # The token is shown only when the share is made.
    assert all(s["url"] is None for s in every["results"])


def test_another_user_gets_404_for_the_owners_conversation_and_shares(api, chat, outsider, as_user):
    created = share(api, chat)
    mallory = as_user(outsider)

    answers = [
        mallory.post(f"/api/v1/conversations/{chat.pk}/shares/", {}, format="json"),
        mallory.get(f"/api/v1/conversations/{chat.pk}/shares/"),
        mallory.delete(f"/api/v1/shares/{created['id']}/"),
        mallory.delete(f"/api/v1/shares/{UNKNOWN}/"),
        mallory.delete("/api/v1/shares/not-an-id/"),
    ]

    assert [a.status_code for a in answers] == [404] * 5
    assert mallory.get("/api/v1/shares/").json()["results"] == []
    assert Share.objects.get().revoked_at is None


def test_anonymous_callers_cannot_manage_shares(chat):
    anonymous = APIClient()

    answers = [
        anonymous.post(f"/api/v1/conversations/{chat.pk}/shares/", {}, format="json"),
        anonymous.get(f"/api/v1/conversations/{chat.pk}/shares/"),
        anonymous.get("/api/v1/shares/"),
        anonymous.delete(f"/api/v1/shares/{UNKNOWN}/"),
    ]

    assert [a.status_code for a in answers] == [401] * 4
    assert not Share.objects.exists()


def test_continue_forks_the_snapshot_into_the_callers_own_conversation(
    api, chat, outsider, as_user
):
    token = token_of(share(api, chat))
    services.message_append(conversation=chat, message=NewMessage(role="user", content="Later"))

    response = as_user(outsider).post(f"/api/v1/shared/{token}/continue/")

    assert response.status_code == 201, response.content
    copy = Conversation.objects.get(pk=response.json()["id"])
    assert copy.owner == outsider
    assert copy.title == "Cats"
    assert copy.system_prompt == ""
    assert copy.draft == ""
    contents = list(
        Message.objects.filter(conversation=copy).order_by("seq").values_list("content", flat=True)
    )
    assert contents == ["Why do cats purr?", "Mostly contentment."]


def test_continue_needs_a_signed_in_caller_and_an_open_link(api, chat):
    token = token_of(share(api, chat))
    before = Conversation.objects.count()

    anonymous = APIClient().post(f"/api/v1/shared/{token}/continue/")
    unknown = api.post("/api/v1/shared/no-such-token/continue/")

    assert anonymous.status_code == 401
    assert unknown.status_code == 404
    assert Conversation.objects.count() == before


def test_deleting_the_conversation_closes_its_links(api, chat):
    token = token_of(share(api, chat))

    services.conversation_delete(conversation=chat)

    assert read(APIClient(), token).status_code == 404


def test_reads_of_links_are_limited_per_client(api, chat):
    token = token_of(share(api, chat))
    client = APIClient()

    codes = [read(client, token).status_code for _ in range(61)]

    assert codes[:60] == [200] * 60
    assert codes[60] == 429


def _with_model_context(conversation: Conversation) -> None:
    """A notice of the owner's draft edit and a context event between the turns: stored
    for the model, never part of the transcript a reader sees."""
    services.messages_append(
        conversation=conversation,
        messages=[
            NewMessage(
                role="system",
                kind=Message.Kind.DRAFT_EDIT,
                content=f'[user edited the draft to: "{SECRET_DRAFT}"]',
            ),
            NewMessage(role="system", kind=Message.Kind.EVENT, content="[owner opened file x]"),
            NewMessage(role="user", content="And lions?"),
            NewMessage(role="assistant", content="They roar.", usage={"input_tokens": 7}),
        ],
    )


def test_a_reader_sees_the_transcript_and_none_of_the_owners_records(api, chat):
    _with_model_context(chat)
    token = token_of(share(api, chat))

    body = read(APIClient(), token).json()

    assert [m["content"] for m in body["messages"]] == [
        "Why do cats purr?",
        "Mostly contentment.",
        "And lions?",
        "They roar.",
    ]
    assert SECRET_DRAFT not in str(body)
    for message in body["messages"]:
        assert not {"conversation_id", "branch_id", "run_id", "usage", "provider_payload"} & set(
            message
        )
    assert str(chat.pk) not in str(body)


def test_continue_copies_what_the_reader_sees_with_gapless_seqs(api, chat, outsider, as_user):
    _with_model_context(chat)
    token = token_of(share(api, chat))

    copy_id = as_user(outsider).post(f"/api/v1/shared/{token}/continue/").json()["id"]

    copy = Conversation.objects.get(pk=copy_id)
    rows = list(Message.objects.filter(conversation=copy).order_by("seq").values("seq", "content"))
    assert [row["seq"] for row in rows] == [1, 2, 3, 4]
    assert SECRET_DRAFT not in str(rows)
    assert copy.message_count == 4
    page = as_user(outsider).get(f"/api/v1/conversations/{copy_id}/messages/").json()
    assert [m["content"] for m in page["results"]][-1] == "They roar."


def test_a_conversation_has_at_most_the_configured_open_links(api, chat, settings):
    settings.PARLEY_MAX_SHARES_PER_CONVERSATION = 2
    first = share(api, chat)
    share(api, chat, expires_at=(timezone.now() + timedelta(days=1)).isoformat())

    refused = api.post(f"/api/v1/conversations/{chat.pk}/shares/", {}, format="json")

    assert refused.status_code == 400
    assert "revoke one first" in str(error_of(refused))
    assert Share.objects.count() == 2
    # A revoked link no longer counts.
    assert api.delete(f"/api/v1/shares/{first['id']}/").status_code == 204
    share(api, chat)


def test_share_lists_come_a_page_at_a_time(api, chat):
    made = [share(api, chat)["id"] for _ in range(5)]

    seen: list[str] = []
    url: str | None = "/api/v1/shares/?limit=2"
    while url:
        body = api.get(url).json()
        assert len(body["results"]) <= 2
        seen += [item["id"] for item in body["results"]]
        url = body["next"]
    first = api.get(f"/api/v1/conversations/{chat.pk}/shares/?limit=3").json()

    assert seen == list(reversed(made))
    assert [item["id"] for item in first["results"]] == list(reversed(made))[:3]
    assert first["next"] is not None
    assert api.get("/api/v1/shares/?cursor=garbage").status_code == 400
