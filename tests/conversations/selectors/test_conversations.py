"""Reads: only the owner's rows, stable cursor pages, search."""

from datetime import timedelta

import pytest
from django.utils import timezone

from conversations import selectors, services
from conversations.errors import ValidationFailed
from conversations.models import Conversation


def make_conversations(user, count):
    base = timezone.now() - timedelta(days=1)
    made = []
    for i in range(count):
        c = services.conversation_create(owner=user, title=f"chat {i}")
        # Distinct and some equal activity times, to exercise the id tie-break.
        Conversation.objects.filter(pk=c.pk).update(
            last_activity_at=base + timedelta(minutes=i // 2)
        )
        made.append(c)
    return made


def walk(user, **kwargs):
    seen, cursor = [], None
    while True:
        page = selectors.conversation_list(user=user, cursor=cursor, **kwargs)
        seen += page.items
        if page.next_cursor is None:
            return seen
        cursor = page.next_cursor


@pytest.mark.django_db
def test_list_pages_cover_every_conversation_once_newest_first(owner):
    make_conversations(owner, 23)
    seen = walk(owner, limit=5)
    assert len(seen) == 23
    assert len({c.pk for c in seen}) == 23
    keys = [(c.last_activity_at, c.pk) for c in seen]
    assert keys == sorted(keys, reverse=True)


@pytest.mark.django_db
def test_selectors_never_return_another_users_conversations(owner, outsider):
    mine = make_conversations(owner, 3)
    theirs = make_conversations(outsider, 4)
    services.user_message_append(conversation=theirs[0], content="secret plans")

    assert {c.pk for c in walk(owner)} == {c.pk for c in mine}
    assert selectors.conversation_list(user=owner, q="chat").items
    assert all(c.owner_id == owner.pk for c in selectors.conversation_list(user=owner, q="").items)
    with pytest.raises(Conversation.DoesNotExist):
        selectors.conversation_get(user=owner, conversation_id=theirs[0].pk)
    assert selectors.search_hits(user=owner, q="secret") == []
    assert len(selectors.search_hits(user=outsider, q="SECRET")) == 1


@pytest.mark.django_db
@pytest.mark.parametrize("bad_id", ["not-a-uuid", "", "123"])
def test_malformed_ids_look_like_unknown_ones(owner, bad_id):
    with pytest.raises(Conversation.DoesNotExist):
        selectors.conversation_get(user=owner, conversation_id=bad_id)


@pytest.mark.django_db
def test_archived_filter_and_title_search(owner):
    a, b, _ = make_conversations(owner, 3)
    services.conversation_update(conversation=a, archived=True)
    services.conversation_update(conversation=b, title="Lisbon weekend")

    assert [c.pk for c in selectors.conversation_list(user=owner, archived=True).items] == [a.pk]
    assert a.pk not in [c.pk for c in selectors.conversation_list(user=owner).items]
    assert len(selectors.conversation_list(user=owner, archived=None).items) == 3
    found = selectors.conversation_list(user=owner, q="lisbon").items
    assert [c.pk for c in found] == [b.pk]


@pytest.mark.django_db
def test_a_tampered_cursor_is_a_clear_error(owner):
    with pytest.raises(ValidationFailed) as excinfo:
        selectors.conversation_list(user=owner, cursor="bm9wZQ")
    assert excinfo.value.problems[0].path == "$.cursor"


@pytest.mark.django_db
def test_message_pages_stay_stable_while_messages_are_added(conversation):
    for i in range(7):
        services.user_message_append(conversation=conversation, content=f"m{i}")
    first = selectors.message_page(conversation=conversation, limit=3)
    assert [m.seq for m in first.items] == [1, 2, 3]
    # New messages arrive between page reads: the next page continues where it stopped.
    services.user_message_append(conversation=conversation, content="late")
    second = selectors.message_page(
        conversation=conversation, after=int(first.next_cursor or 0), limit=3
    )
    assert [m.seq for m in second.items] == [4, 5, 6]
    last = selectors.message_page(conversation=conversation, after=6, limit=3)
    assert [m.content for m in last.items] == ["m6", "late"]
    assert last.next_cursor is None


@pytest.mark.django_db
def test_page_size_is_capped(conversation):
    services.messages_append(
        conversation=conversation,
        messages=[services.NewMessage(role="user", content=str(i)) for i in range(250)],
    )
    assert len(selectors.message_page(conversation=conversation, limit=10_000).items) == 200


@pytest.mark.django_db
def test_a_run_is_followable_while_its_owners_credential_holds_and_it_exists(
    conversation, owner, outsider
):
    from accounts import services as account_services
    from accounts.sockets import SocketCredential
    from conversations.models import Run

    run = Run.objects.create(conversation=conversation, status="in_progress")
    key, _ = account_services.api_key_create(owner=owner, name="k")
    theirs, _ = account_services.api_key_create(owner=outsider, name="k")
    mine = SocketCredential(user_id=owner.pk, api_key_id=key.pk)

    assert selectors.run_followable(run_id=run.pk, credential=mine)
    # Another user's live key follows nothing of this user's.
    other = SocketCredential(user_id=outsider.pk, api_key_id=theirs.pk)
    assert not selectors.run_followable(run_id=run.pk, credential=other)
    account_services.api_key_revoke(api_key=key)
    assert not selectors.run_followable(run_id=run.pk, credential=mine)
    fresh, _ = account_services.api_key_create(owner=owner, name="fresh")
    again = SocketCredential(user_id=owner.pk, api_key_id=fresh.pk)
    assert selectors.run_followable(run_id=run.pk, credential=again)
    run_id = run.pk
    run.delete()
    assert not selectors.run_followable(run_id=run_id, credential=again)
