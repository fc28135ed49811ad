"""No admin URL reveals what people and models wrote to staff without view_transcript.

Every lookup Django offers on every text field (and across relations to it), orderings,
searches and the autocomplete: refused with the same 400 whatever the data holds, for
staff without the permission; allowed and audited for those with it; never a 500.
"""

from typing import Any

import pytest
from django.urls import reverse

from accounts import services as account_services
from accounts.models import User
from conversations import services
from conversations.models import AuditEvent, Conversation, Message, Run, StoredFile
from tests.support.admin import MODERATOR_PERMISSIONS, SECRET, chat, client_for, staff

pytestmark = pytest.mark.django_db

TEXT_FIELDS = {
    Conversation: ["title", "system_prompt", "draft", "metadata"],
    Message: ["content", "reasoning", "tool_calls", "provider_payload"],
    Run: ["error", "client_id"],
    StoredFile: ["filename"],
}
# (admin changelist, lookup prefix, model whose text fields the prefix reaches)
USER_PERMISSIONS = ["view_user", "view_apikey"]
READER_PERMISSIONS = [*MODERATOR_PERMISSIONS, *USER_PERMISSIONS, "view_transcript"]
PATHS = [
    ("conversations_conversation", "", Conversation),
    ("conversations_conversation", "messages__", Message),
    ("conversations_message", "", Message),
    ("conversations_message", "conversation__", Conversation),
    ("conversations_run", "trigger_message__", Message),
    ("conversations_run", "conversation__", Conversation),
    ("conversations_run", "messages__", Message),
    ("conversations_run", "", Run),
    ("conversations_conversation", "runs__", Run),
    ("conversations_message", "run__", Run),
    ("accounts_user", "conversations__", Conversation),
    ("accounts_apikey", "owner__conversations__", Conversation),
    ("conversations_message", "attachments__file__", StoredFile),
    ("conversations_conversation", "attachments__file__", StoredFile),
    ("accounts_user", "files__", StoredFile),
]


def value_for(lookup: str) -> str:
    return {"isnull": "1", "in": "a,b", "range": "a,b", "has_keys": "a,b"}.get(lookup, "Hel")


def probes() -> list[tuple[str, str, str]]:
    """(admin, query parameter, value) for every lookup of every text field."""
    found = []
    for admin_name, prefix, model in PATHS:
        for name in TEXT_FIELDS[model]:
            field: Any = model._meta.get_field(name)
            lookups = sorted(field.get_lookups())
            for lookup in lookups:
                found.append((admin_name, f"{prefix}{name}__{lookup}", value_for(lookup)))
            found.append((admin_name, f"{prefix}{name}", "Hel"))
            if field.get_internal_type() == "JSONField":
                found.append((admin_name, f"{prefix}{name}__0__name", "x"))
                found.append((admin_name, f"{prefix}{name}__key__startswith", "x"))
    return found


@pytest.fixture
def world(owner: User) -> Conversation:
    conversation = chat(owner, title="Hello there")
    services.conversation_update(conversation=conversation, metadata={"key": "Hello meta"})
    Conversation.objects.filter(pk=conversation.pk).update(draft="Hello draft")
    Run.objects.create(
        conversation=conversation,
        status="completed",
        trigger_message=conversation.messages.order_by("seq").first(),
        client_id="Hello client",
        error={"code": "provider_error", "message": "Hello error"},
    )
    account_services.api_key_create(owner=owner, name="laptop")
    return conversation


def changelist(admin_name: str) -> str:
    return reverse(f"admin:{admin_name}_changelist")


def test_every_text_lookup_is_refused_alike_without_the_permission(world):
    # A moderator who may also list users and API keys.
    client = client_for(staff("usermod", *MODERATOR_PERMISSIONS, *USER_PERMISSIONS))
    for admin_name, param, value in probes():
        response = client.get(changelist(admin_name), {param: value})
        assert response.status_code == 400, (admin_name, param)
    assert not AuditEvent.objects.exists()


def test_a_probe_answers_the_same_whether_it_matches_or_not(moderator, world):
    client = client_for(moderator)
    url = changelist("conversations_message")
    hit = client.get(url, {"content__startswith": SECRET[:5]})
    miss = client.get(url, {"content__startswith": "zzz"})
    assert hit.status_code == miss.status_code == 400
    assert hit.content == miss.content


def test_every_text_lookup_works_for_a_reader_without_a_500_and_is_audited(world):
    client = client_for(staff("reader", *READER_PERMISSIONS))
    for admin_name, param, value in probes():
        before = AuditEvent.objects.count()
        response = client.get(changelist(admin_name), {param: value})
        # 200, the change list's own "invalid filter" redirect (a lookup the database
        # cannot apply, e.g. a JSON containment on SQLite), or Django's refusal of a
        # lookup across relations that no filter offers; never a server error.
        assert response.status_code in (200, 302, 400), (admin_name, param, response.status_code)
        if response.status_code == 302:
            assert response["Location"].endswith("?e=1")
            assert client.get(response["Location"]).status_code == 200
        elif response.status_code == 400:
            local = [name for names in TEXT_FIELDS.values() for name in names]
            assert not param.startswith(tuple(local)), (admin_name, param)
        else:
            event = AuditEvent.objects.order_by("-at", "-pk").first()
            assert AuditEvent.objects.count() == before + 1, (admin_name, param)
            assert event is not None
            assert event.actor_username == "reader"
            assert event.action == "viewed"
            assert param in event.reason


def test_a_reader_finds_messages_by_text_lookup(reader, world):
    url = changelist("conversations_message")
    response = client_for(reader).get(url, {"content__startswith": SECRET[:5]})
    assert response.status_code == 200
    assert len(response.context["cl"].result_list) == 2
    missing = client_for(reader).get(url, {"content__startswith": "zzz"})
    assert len(missing.context["cl"].result_list) == 0


@pytest.mark.parametrize(
    "params",
    [
        {"seq__gt": "abc"},
        {"created_at__gte": "not a date"},
        {"id": "not-a-uuid"},
        {"no_such_field": "1"},
        {"tool_calls__contains": "x", "e": "1"},
        {"content__regex": "(unclosed"},
        {"o": "99"},
        {"p": "-3"},
    ],
)
def test_no_lookup_answers_500(superuser, world, params):
    client = client_for(superuser)
    for admin_name in {admin for admin, _, _ in PATHS}:
        response = client.get(changelist(admin_name), params)
        assert response.status_code < 500, (admin_name, params)


def test_ordering_by_title_is_offered_only_to_readers(moderator, reader, world):
    url = changelist("conversations_conversation")
    moderator_list = client_for(moderator).get(url)
    assert "conversation" not in moderator_list.context["cl"].sortable_by
    # `o=1` would sort by the first column: without the permission it is ignored.
    sorted_page = client_for(moderator).get(url, {"o": "1"})
    assert sorted_page.status_code in (200, 302)
    assert "title_or_id" in client_for(reader).get(url).context["cl"].sortable_by


def test_titles_appear_nowhere_for_staff_without_the_permission(moderator, world, owner):
    client = client_for(moderator)
    message = world.messages.order_by("seq").first()
    run = Run.objects.get(conversation=world)
    assert message is not None
    pages = {
        "list": changelist("conversations_conversation"),
        "detail": reverse("admin:conversations_conversation_change", args=[world.pk]),
        "history": reverse("admin:conversations_conversation_history", args=[world.pk]),
        "delete": reverse("admin:conversations_conversation_delete", args=[world.pk]),
        "message": reverse("admin:conversations_message_change", args=[message.pk]),
        "run": reverse("admin:conversations_run_change", args=[run.pk]),
        "messages": changelist("conversations_message"),
        "runs": changelist("conversations_run"),
        "user": reverse("admin:accounts_user_change", args=[owner.pk]),
        "autocomplete": reverse("admin:autocomplete")
        + "?app_label=conversations&model_name=message&field_name=conversation&term=Hel",
    }
    for name, url in pages.items():
        response = client.get(url)
        body = response.content.decode()
        for text in ("Hello there", "Hello draft", "Hello meta", SECRET, "Be kind."):
            assert text not in body, (name, text)
    # The delete confirmation of the bulk action, too.
    confirm = client.post(
        changelist("conversations_conversation"),
        {"action": "delete_selected", "_selected_action": [str(world.pk)]},
    )
    assert "Hello there" not in confirm.content.decode()
    # Title words find nothing for them.
    search = client.get(changelist("conversations_conversation"), {"q": "Hello"})
    assert list(search.context["cl"].result_list) == []


def test_a_reader_sees_titles_and_metadata(reader, world):
    client = client_for(reader)
    assert "Hello there" in client.get(changelist("conversations_conversation")).content.decode()
    detail = reverse("admin:conversations_conversation_change", args=[world.pk])
    body = client.get(detail).content.decode()
    assert "Hello there" in body
    assert "Hello meta" in body


@pytest.mark.parametrize(
    ("admin_name", "param"),
    [
        ("accounts_user", "password__startswith"),
        ("accounts_user", "password"),
        ("accounts_user", "password__regex"),
        ("accounts_apikey", "hashed_secret__startswith"),
        ("accounts_apikey", "hashed_secret__gt"),
        ("accounts_user", "api_keys__hashed_secret__startswith"),
        ("conversations_conversation", "owner__password__startswith"),
    ],
)
def test_secrets_are_never_a_lookup_even_for_a_superuser(superuser, world, admin_name, param):
    client = client_for(superuser)
    hit = client.get(changelist(admin_name), {param: "pbkdf2"})
    miss = client.get(changelist(admin_name), {param: "zzz"})
    assert hit.status_code == miss.status_code == 400
    assert hit.content == miss.content


def test_an_ordering_by_text_is_dropped_for_staff_without_the_permission(
    moderator, reader, world, monkeypatch
):
    from conversations.admin.conversations import ConversationAdmin

    # As if a column sorting by title were offered to everyone: the change list itself
    # still refuses to sort by it.
    monkeypatch.setattr(
        ConversationAdmin, "get_list_display", lambda self, request: ["title_or_id"]
    )
    url = changelist("conversations_conversation")
    for user, sorted_by_title in [(moderator, False), (reader, True)]:
        for order in ("1", "-1"):
            response = client_for(user).get(url, {"o": order})
            assert response.status_code == 200
            ordering = [str(part) for part in response.context["cl"].queryset.query.order_by]
            assert any("title" in part for part in ordering) == sorted_by_title, ordering


def test_the_autocomplete_matches_titles_only_for_readers_and_audits_them(moderator, reader, world):
    url = reverse("admin:autocomplete")
    query = {"app_label": "conversations", "model_name": "message", "field_name": "conversation"}
    found = client_for(moderator).get(url, {**query, "term": "Hello"})
    assert found.status_code == 200
    assert found.json()["results"] == []
    by_owner = client_for(moderator).get(url, {**query, "term": "alice"}).json()["results"]
    assert [row["id"] for row in by_owner] == [str(world.pk)]
    assert "Hello" not in str(by_owner)
    assert not AuditEvent.objects.exists()

    read = client_for(reader).get(url, {**query, "term": "Hello"}).json()["results"]
    assert [row["id"] for row in read] == [str(world.pk)]
    event = AuditEvent.objects.get()
    assert (event.action, event.actor_username) == ("viewed", "reader")
    assert event.reason == "conversation autocomplete: search <5 characters>"


def test_a_readers_list_request_is_one_audit_event_naming_lookups_and_search(reader, world):
    url = changelist("conversations_message")
    response = client_for(reader).get(url, {"content__startswith": "the s", "q": "recipe"})
    assert response.status_code == 200
    event = AuditEvent.objects.get()
    # What was typed is not kept: it would copy message text into the trail.
    assert event.reason == "message list: content__startswith=<5 characters>, search <6 characters>"
    assert "recipe" not in event.reason


def test_an_action_on_a_text_filtered_list_is_refused_without_the_permission(moderator, world):
    url = changelist("conversations_conversation") + "?draft__startswith=Hel"
    response = client_for(moderator).post(
        url, {"action": "flag", "_selected_action": [str(world.pk)], "reason": "x", "apply": "1"}
    )
    assert response.status_code == 400
    assert not Conversation.objects.filter(flagged=True).exists()


def test_an_action_with_a_lookup_the_database_refuses_is_not_a_500(superuser, world):
    client = client_for(superuser)
    data = {"action": "delete_selected", "_selected_action": [str(world.pk)], "apply": "1"}
    # An invalid regular expression (PostgreSQL refuses it when the query runs), a JSON
    # containment SQLite cannot do, a date that is not one.
    for query in ("?draft__regex=(unclosed", "?metadata__contains=x", "?created_at__gt=x"):
        response = client.post(changelist("conversations_conversation") + query, data)
        assert response.status_code in (200, 302), query
        if response.status_code == 302:
            # The invalid-filter page, or back to the list when nothing matched.
            assert response["Location"].endswith(("?e=1", query)), query
    assert Conversation.objects.filter(pk=world.pk).exists()


def test_a_run_shows_its_error_message_only_to_readers(moderator, reader, world):
    run = Run.objects.get(conversation=world)
    url = reverse("admin:conversations_run_change", args=[run.pk])
    moderator_page = client_for(moderator).get(url).content.decode()
    assert "Hello error" not in moderator_page
    assert "provider_error" in moderator_page
    assert "Hello error" in client_for(reader).get(url).content.decode()


def test_every_registered_admin_is_guarded(rf):
    from django.contrib import admin

    from conversations.admin.text_guard import GuardedChangeList, TextGuardMixin

    request = rf.get("/")
    for model, model_admin in admin.site._registry.items():
        assert isinstance(model_admin, TextGuardMixin), model
        assert model_admin.get_changelist(request) is GuardedChangeList, model
