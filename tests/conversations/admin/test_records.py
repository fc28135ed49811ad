"""Users (conversation counts, the fast delete path), API keys, runs, the changelist's
search, filters and paginator."""

import uuid
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from accounts import services as account_services
from accounts.models import ApiKey, User
from conversations.admin.paging import COUNT_CAP, EstimatedCountPaginator
from conversations.models import AuditEvent, Conversation, DailyMessageCount, Message, Run
from tests.support.admin import chat, client_for, staff

pytestmark = pytest.mark.django_db

CHANGELIST = reverse("admin:conversations_conversation_changelist")


# --- users -----------------------------------------------------------------------------


def test_user_list_shows_conversation_and_message_counts(superuser, owner, outsider):
    chat(owner, "a")
    chat(owner, "b", turns=1)
    response = client_for(superuser).get(reverse("admin:accounts_user_changelist"))
    assert response.status_code == 200
    rows = {u.username: u for u in response.context["cl"].result_list}
    assert (rows["alice"].conversations_total, rows["alice"].messages_total) == (2, 6)
    assert (rows["mallory"].conversations_total, rows["mallory"].messages_total) == (0, 0)


def test_deleting_a_user_removes_their_data_and_keeps_audit_events(superuser, owner, outsider):
    mine = [chat(owner, "a"), chat(owner, "b")]
    theirs = chat(outsider, "theirs")
    account_services.api_key_create(owner=owner, name="laptop")
    Run.objects.create(conversation=mine[0], status=Run.Status.COMPLETED)
    DailyMessageCount.objects.create(user=owner, day=timezone.now().date(), messages=3)
    from conversations import services

    services.audit_record(actor=superuser, action="viewed", conversation=mine[0])
    client = client_for(superuser)
    url = reverse("admin:accounts_user_delete", args=[owner.pk])

    page = client.get(url)
    assert page.status_code == 200
    assert "Be kind" not in page.content.decode()
    client.post(url, {"post": "yes"})

    assert not User.objects.filter(pk=owner.pk).exists()
    assert list(Conversation.objects.all()) == [theirs]
    assert set(Message.objects.values_list("conversation_id", flat=True)) == {theirs.pk}
    assert not Run.objects.exists()
    assert not ApiKey.objects.exists()
    assert not DailyMessageCount.objects.exists()
    deleted = AuditEvent.objects.filter(action="deleted")
    assert {e.conversation_id for e in deleted} == {c.pk for c in mine}
    assert {e.owner_id for e in deleted} == {owner.pk}
    # The earlier event about the user's conversation stays too.
    assert AuditEvent.objects.filter(action="viewed", owner_id=owner.pk).exists()


def test_deleting_a_moderator_keeps_their_audit_events(superuser, reader, baking):
    client_for(reader).get(reverse("admin:conversations_conversation_transcript", args=[baking.pk]))
    client_for(superuser).post(
        reverse("admin:accounts_user_delete", args=[reader.pk]), {"post": "yes"}
    )
    assert not User.objects.filter(pk=reader.pk).exists()
    event = AuditEvent.objects.get(action="viewed")
    assert event.actor is None
    assert event.actor_username == "reader"
    assert event.conversation_id == baking.pk


def test_bulk_user_delete_action_uses_the_fast_path(superuser, owner, outsider):
    chat(owner)
    chat(outsider)
    client_for(superuser).post(
        reverse("admin:accounts_user_changelist"),
        {"action": "delete_selected", "_selected_action": [owner.pk, outsider.pk], "post": "yes"},
    )
    assert not Conversation.objects.exists()
    assert AuditEvent.objects.filter(action="deleted").count() == 2


# --- API keys --------------------------------------------------------------------------


def test_api_key_revoke_action(superuser, owner):
    key, _ = account_services.api_key_create(owner=owner, name="ci")
    other, _ = account_services.api_key_create(owner=owner, name="laptop")
    client_for(superuser).post(
        reverse("admin:accounts_apikey_changelist"),
        {"action": "revoke_keys", "_selected_action": [str(key.pk)], "index": "0"},
    )
    key.refresh_from_db()
    other.refresh_from_db()
    assert key.revoked_at is not None
    assert other.revoked_at is None


def test_api_key_revoke_needs_the_change_permission(owner):
    key, _ = account_services.api_key_create(owner=owner, name="ci")
    viewer = staff("keyviewer", "view_apikey")
    client_for(viewer).post(
        reverse("admin:accounts_apikey_changelist"),
        {"action": "revoke_keys", "_selected_action": [str(key.pk)], "index": "0"},
    )
    key.refresh_from_db()
    assert key.revoked_at is None


# --- runs ------------------------------------------------------------------------------


def test_run_cancel_action_ends_a_queued_run(moderator, baking):
    run = Run.objects.create(conversation=baking, status=Run.Status.QUEUED)
    finished = chat(baking.owner, "other")
    done = Run.objects.create(conversation=finished, status=Run.Status.COMPLETED)
    client_for(moderator).post(
        reverse("admin:conversations_run_changelist"),
        {"action": "cancel_runs", "_selected_action": [str(run.pk), str(done.pk)], "index": "0"},
    )
    run.refresh_from_db()
    done.refresh_from_db()
    assert run.status == Run.Status.CANCELLED
    assert done.status == Run.Status.COMPLETED


def test_run_cancel_needs_the_change_permission(baking):
    run = Run.objects.create(conversation=baking, status=Run.Status.QUEUED)
    viewer = staff("runviewer", "view_run")
    client_for(viewer).post(
        reverse("admin:conversations_run_changelist"),
        {"action": "cancel_runs", "_selected_action": [str(run.pk)], "index": "0"},
    )
    run.refresh_from_db()
    assert run.status == Run.Status.QUEUED


def test_run_list_shows_status_tokens_and_the_active_run_on_conversations(moderator, baking):
    Run.objects.create(
        conversation=baking,
        status=Run.Status.IN_PROGRESS,
        usage={"total_tokens": 1234},
    )
    client = client_for(moderator)
    runs = client.get(reverse("admin:conversations_run_changelist")).content.decode()
    assert "1234" in runs
    assert "in_progress" in runs or "In_Progress" in runs or "In progress" in runs
    listing = client.get(CHANGELIST).content.decode()
    assert ">running</a>" in listing


# --- conversation list: search, filters, paginator --------------------------------------


def results(client, **params) -> set[Conversation]:
    response = client.get(CHANGELIST, params)
    assert response.status_code == 200
    return set(response.context["cl"].result_list)


def test_search_by_title_owner_email_and_exact_id(moderator, reader, owner, outsider):
    owner.email = "alice@example.com"
    owner.save()
    cats = chat(owner, "Cats and dogs", turns=0)
    trip = chat(outsider, "Trip", turns=0)
    # Titles are text: only a transcript reader finds by them, and that search is audited.
    assert results(client_for(reader), q="cats") == {cats}
    assert AuditEvent.objects.get().reason == "conversation list: search <4 characters>"
    client = client_for(moderator)
    assert results(client, q="cats") == set()
    assert results(client, q="mallory") == {trip}
    assert results(client, q="ALICE@example.com") == {cats}
    assert results(client, q="alice@example") == set()  # owners match whole
    assert results(client, q=str(trip.pk)) == {trip}
    assert results(client, q=str(uuid.uuid4())) == set()


def test_filters_flagged_archived_model_owner_and_date(moderator, owner, outsider):
    flagged = chat(owner, "flagged", turns=0)
    archived = chat(owner, "archived", turns=0)
    other_model = chat(outsider, "gpt-x", turns=0)
    old = chat(outsider, "old", turns=0)
    Conversation.objects.filter(pk=flagged.pk).update(flagged=True)
    Conversation.objects.filter(pk=archived.pk).update(archived_at=timezone.now())
    Conversation.objects.filter(pk=other_model.pk).update(model="gpt-x")
    Conversation.objects.filter(pk=old.pk).update(
        last_activity_at=timezone.now() - timedelta(days=60)
    )
    client = client_for(moderator)
    assert results(client, flagged__exact="1") == {flagged}
    assert results(client, archived="yes") == {archived}
    assert archived not in results(client, archived="no")
    assert results(client, model="gpt-x") == {other_model}
    assert results(client, owner=str(owner.pk)) == {flagged, archived}
    recent = results(client, last_activity_at__gte=(timezone.now() - timedelta(days=7)).isoformat())
    assert old not in recent
    assert flagged in recent


def test_changelist_never_runs_a_full_count(moderator, owner):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    chat(owner, turns=0)
    with CaptureQueriesContext(connection) as captured:
        client_for(moderator).get(CHANGELIST)
    counts = [q["sql"] for q in captured.captured_queries if "COUNT(" in q["sql"].upper()]
    assert counts
    assert all("LIMIT" in sql.upper() for sql in counts), counts


def test_paginator_counts_exactly_up_to_the_cap(owner):
    for i in range(3):
        chat(owner, f"c{i}", turns=0)
    paginator = EstimatedCountPaginator(Conversation.objects.order_by("pk"), 2)
    assert paginator.count == 3
    assert paginator.num_pages == 2
    assert COUNT_CAP >= 1000


def test_paginator_past_the_cap_counts_by_the_planners_estimate(owner, outsider, monkeypatch):
    from django.db import connection

    from conversations.admin import paging

    for i in range(3):
        chat(owner, f"c{i}", turns=0)
    chat(outsider, "theirs", turns=0)
    monkeypatch.setattr(paging, "COUNT_CAP", 1)
    everything = Conversation.objects.order_by("pk")
    mine = everything.filter(owner=owner)
    if connection.vendor != "postgresql":
        # No planner to ask: the capped count stands.
        assert EstimatedCountPaginator(everything, 2).count == 2
        return
    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE {connection.ops.quote_name(Conversation._meta.db_table)}")
    assert EstimatedCountPaginator(everything, 2).count == 4
    assert EstimatedCountPaginator(mine, 2).count == 3
