"""Retention purge (service, command, beat task), quotas, and the usage dashboard."""

import json
from datetime import timedelta
from io import StringIO

import pytest
from django.conf import settings
from django.core.management import CommandError, call_command
from django.urls import reverse
from django.utils import timezone

from conversations import engine, selectors, services, tasks
from conversations.errors import QuotaExceeded
from conversations.formats import exporting
from conversations.models import AuditEvent, Conversation, Message, Run
from tests.support.admin import chat, client_for

pytestmark = pytest.mark.django_db


def aged(conversation: Conversation, days: float) -> Conversation:
    Conversation.objects.filter(pk=conversation.pk).update(
        last_activity_at=timezone.now() - timedelta(days=days)
    )
    return conversation


# --- retention ---------------------------------------------------------------------------


@pytest.fixture
def ages(owner, outsider) -> dict[str, Conversation]:
    return {
        "expired": aged(chat(owner, "expired"), 45),
        "expired_other_owner": aged(chat(outsider, "expired too"), 31),
        "fresh": aged(chat(owner, "fresh"), 29),
        "today": chat(owner, "today"),
    }


def test_purge_dry_run_changes_nothing(ages, settings):
    settings.PARLEY_RETENTION_DAYS = 30
    before = (Conversation.objects.count(), Message.objects.count())
    out = StringIO()
    call_command("purge_conversations", "--dry-run", stdout=out)
    assert "Would delete 2 conversation(s) with 8 message(s)" in out.getvalue()
    assert (Conversation.objects.count(), Message.objects.count()) == before
    assert not AuditEvent.objects.exists()


def test_purge_removes_exactly_the_expired_and_audits_each(ages, settings):
    settings.PARLEY_RETENTION_DAYS = 30
    out, err = StringIO(), StringIO()
    call_command("purge_conversations", stdout=out, stderr=err)
    assert "Deleted 2 conversation(s) with 8 message(s)" in out.getvalue()
    assert set(Conversation.objects.all()) == {ages["fresh"], ages["today"]}
    assert not Message.objects.filter(
        conversation_id__in=[ages["expired"].pk, ages["expired_other_owner"].pk]
    ).exists()
    events = AuditEvent.objects.filter(action="purged")
    assert {e.conversation_id for e in events} == {
        ages["expired"].pk,
        ages["expired_other_owner"].pk,
    }
    assert all(e.actor is None and "30 days" in e.reason for e in events)
    assert "2/2" in err.getvalue()  # the progress bar reached the end


def test_purge_keeps_a_conversation_with_an_active_run(ages, settings):
    settings.PARLEY_RETENTION_DAYS = 30
    Run.objects.create(conversation=ages["expired"], status=Run.Status.IN_PROGRESS)
    result = services.conversations_purge()
    assert result.conversations == 1
    assert Conversation.objects.filter(pk=ages["expired"].pk).exists()


def test_purge_command_days_option_and_refusal_when_off(ages, settings):
    settings.PARLEY_RETENTION_DAYS = 0
    with pytest.raises(CommandError, match="Retention is off"):
        call_command("purge_conversations")
    call_command("purge_conversations", "--days", "40", stdout=StringIO(), stderr=StringIO())
    assert not Conversation.objects.filter(pk=ages["expired"].pk).exists()
    assert Conversation.objects.filter(pk=ages["expired_other_owner"].pk).exists()


def test_beat_task_purges_only_when_retention_is_set(ages, settings):
    settings.PARLEY_RETENTION_DAYS = 0
    assert tasks.conversations_purge() == {
        "conversations": 0,
        "messages": 0,
        "abandoned_imports": 0,
    }
    assert Conversation.objects.count() == 4
    settings.PARLEY_RETENTION_DAYS = 30
    assert tasks.conversations_purge() == {
        "conversations": 2,
        "messages": 8,
        "abandoned_imports": 0,
    }
    assert Conversation.objects.count() == 2


def test_retention_task_is_on_the_beat_schedule():
    entry = settings.CELERY_BEAT_SCHEDULE["conversations-retention"]
    assert entry["task"] == "conversations.tasks.conversations_purge"


# --- quotas ------------------------------------------------------------------------------


def test_conversation_quota_refuses_the_next_one_and_stores_nothing(owner, outsider, settings):
    settings.PARLEY_MAX_CONVERSATIONS_PER_USER = 2
    services.conversation_create(owner=owner)
    first = services.conversation_create(owner=owner)
    with pytest.raises(QuotaExceeded) as excinfo:
        services.conversation_create(owner=owner)
    assert excinfo.value.code == "conversation_quota_exceeded"
    assert "limit of 2 conversations" in excinfo.value.message
    with pytest.raises(QuotaExceeded):
        services.conversation_fork(conversation=chat_in(first), at_seq=1)
    assert Conversation.objects.filter(owner=owner).count() == 2
    services.conversation_create(owner=outsider)  # quotas are per user


def chat_in(conversation: Conversation) -> Conversation:
    services.user_message_append(conversation=conversation, content="hi")
    return conversation


def test_message_quota_counts_per_day_and_refuses_without_storing(conversation, settings):
    settings.PARLEY_MAX_MESSAGES_PER_DAY = 2
    services.user_message_append(conversation=conversation, content="one")
    services.user_message_append(conversation=conversation, content="two")
    with pytest.raises(QuotaExceeded) as excinfo:
        services.user_message_append(conversation=conversation, content="three")
    assert excinfo.value.code == "message_quota_exceeded"
    assert "maximum of 2 messages" in excinfo.value.message
    conversation.refresh_from_db()
    assert conversation.message_count == 2
    assert list(conversation.messages.values_list("content", flat=True)) == ["one", "two"]


def test_message_quota_also_stops_run_start(conversation, settings):
    settings.PARLEY_MAX_MESSAGES_PER_DAY = 1
    services.user_message_append(conversation=conversation, content="one")
    with pytest.raises(QuotaExceeded):
        engine.run_start(conversation=conversation, content="two")
    assert not Run.objects.exists()
    assert conversation.messages.count() == 1


def test_zero_means_unlimited(conversation, settings):
    settings.PARLEY_MAX_MESSAGES_PER_DAY = 0
    settings.PARLEY_MAX_CONVERSATIONS_PER_USER = 0
    for i in range(5):
        services.user_message_append(conversation=conversation, content=f"m{i}")
        services.conversation_create(owner=conversation.owner)
    assert conversation.messages.count() == 5


# --- usage dashboard ---------------------------------------------------------------------

USAGE = reverse("admin:conversations_conversation_usage")


def test_usage_selectors_count_messages_and_tokens_per_day_and_user(owner, outsider):
    chat(owner, turns=2)  # 4 messages, 30 tokens
    chat(outsider, turns=1)  # 2 messages, 15 tokens
    yesterday = timezone.now() - timedelta(days=1)
    old = chat(outsider, turns=1)
    Message.objects.filter(conversation=old).update(created_at=yesterday)
    services.usage_rebuild()  # messages changed by hand: recount
    today = timezone.now().date()
    days = selectors.usage_by_day(start=today - timedelta(days=2), end=today)
    assert [(d.messages, d.user_messages, d.tokens) for d in days] == [
        (0, 0, 0),
        (2, 1, 15),
        (6, 3, 45),
    ]
    users = selectors.usage_by_user(start=today - timedelta(days=2), end=today)
    assert [(u.username, u.messages, u.tokens, u.conversations) for u in users] == [
        ("alice", 4, 30, 1),
        ("mallory", 4, 30, 2),
    ]


def test_usage_dashboard_renders_charts_and_table_without_text(moderator, owner):
    chat(owner, turns=3)
    response = client_for(moderator).get(USAGE)
    assert response.status_code == 200
    body = response.content.decode()
    assert body.count('role="img"') == 3  # three charts
    assert "45</title>" in body  # today's tokens in a bar's tooltip
    assert response.context["totals"] == {"messages": 6, "user_messages": 3, "tokens": 45}
    assert [u.username for u in response.context["users"]] == ["alice"]
    assert "secret recipe" not in body


def test_usage_dashboard_range_is_validated(moderator):
    client = client_for(moderator)
    response = client.get(USAGE, {"start": "2024-05-10", "end": "2024-05-01"})
    assert response.status_code == 200
    assert "must not be after" in response.content.decode()
    chosen = client.get(USAGE, {"start": "2024-05-01", "end": "2024-05-03"})
    assert len(chosen.context["messages_chart"].split("<rect")) == 4


def test_usage_dashboard_permissions(owner, plain_staff):
    assert client_for(owner).get(USAGE).status_code == 302
    assert client_for(plain_staff).get(USAGE).status_code == 403


def test_imported_and_forked_messages_never_count_as_the_users_own_usage(moderator, owner):
    original = chat(owner, turns=1)  # 2 messages, 15 tokens: spent here
    forged = exporting.export_json(original)
    forged["messages"][1]["usage"] = {"total_tokens": 9_000_000}
    services.conversation_import(owner=owner, document=json.dumps(forged))
    services.conversation_fork(conversation=original, at_seq=2)
    response = client_for(moderator).get(USAGE)
    assert response.status_code == 200
    assert response.context["totals"] == {"messages": 2, "user_messages": 1, "tokens": 15}
    # The copies keep their usage, so an export of them still says what it said.
    copied = Message.objects.filter(copied=True, role="assistant")
    assert sorted((m.usage or {})["total_tokens"] for m in copied) == [15, 9_000_000]


@pytest.mark.parametrize(
    "stored",
    [
        2**63 - 1,
        10**30,
        -5,
        1.5,
        1e300,
        "12",
        "abc",
        True,
        {"nested": 1},
        [3],
        None,
    ],
)
def test_the_usage_dashboard_survives_any_stored_count(moderator, owner, outsider, stored):
    """Counts written before they were checked (or by hand) can neither break nor
    falsify the sums: a count that is not a sane whole number counts as not reported."""
    chat(owner, turns=1)  # 15 tokens
    bad = chat(outsider, turns=2)  # 30 tokens, about to be spoiled
    for message in Message.objects.filter(conversation=bad, role="assistant"):
        Message.objects.filter(pk=message.pk).update(usage={"total_tokens": stored})
    # Counts written by hand (or before they were checked) are read by the recount, as by
    # the migration that first filled the figures (test_usage_rollup.py has
    # the same values arriving with new messages).
    services.usage_rebuild()
    response = client_for(moderator).get(USAGE)
    assert response.status_code == 200
    assert response.context["totals"]["tokens"] == 15
    today = timezone.now().date()
    users = selectors.usage_by_user(start=today, end=today)
    assert [(u.username, u.tokens) for u in users] == [("alice", 15), ("mallory", 0)]
    assert [d.tokens for d in selectors.usage_by_day(start=today, end=today)] == [15]
