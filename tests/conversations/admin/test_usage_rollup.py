"""The usage dashboard reads a daily rollup kept as messages are stored: its figures are
the ones the dashboard used to add up from the messages, and they stay when what caused
them is deleted."""

import importlib
import json
from dataclasses import astuple
from datetime import UTC, date, datetime, time, timedelta
from io import StringIO

import pytest
from django.apps import apps
from django.core.management import call_command
from django.db import transaction
from django.db.models import BigIntegerField, Case, Count, Q, Sum, Value, When
from django.db.models.fields.json import KeyTextTransform
from django.db.models.functions import Cast, Coalesce, TruncDate
from django.urls import reverse
from django.utils import timezone

from accounts.models import User
from conversations import selectors, services
from conversations.formats import exporting
from conversations.models import Conversation, Message, UsageDay
from conversations.services import NewMessage
from tests.support.admin import chat, client_for

pytestmark = pytest.mark.django_db

fill_migration = importlib.import_module("conversations.migrations.0013_usage_day_fill")

TODAY = timezone.now().date()
START = TODAY - timedelta(days=5)
USAGE = reverse("admin:conversations_conversation_usage")


# --- the dashboard's figures as they were computed before the rollup: every message of
# the range added up. The oracle the rollup must agree with. -----------------------------


def _old_tokens() -> Coalesce:
    sane = Q(
        usage__total_tokens__gte=0,
        usage__total_tokens__lt=10**13,
        usage__total_tokens__regex=r"^[0-9]{1,13}$",
    )
    total = Case(
        When(sane, then=Cast(KeyTextTransform("total_tokens", "usage"), BigIntegerField())),
        default=Value(0),
        output_field=BigIntegerField(),
    )
    return Coalesce(Sum(total), 0)


def _old_messages(start: date, end: date):
    since = datetime.combine(start, time.min, tzinfo=UTC)
    until = datetime.combine(end + timedelta(days=1), time.min, tzinfo=UTC)
    return Message.objects.filter(created_at__gte=since, created_at__lt=until, copied=False)


def old_by_day(start: date, end: date) -> list[tuple[date, int, int, int]]:
    found = {
        row["day"]: row
        for row in _old_messages(start, end)
        .annotate(day=TruncDate("created_at"))
        .values("day")
        .annotate(
            messages=Count("pk"),
            user_messages=Count("pk", filter=Q(role="user")),
            tokens=_old_tokens(),
        )
        .order_by()
    }
    days = [start + timedelta(days=n) for n in range((end - start).days + 1)]
    return [
        (
            day,
            found.get(day, {}).get("messages", 0),
            found.get(day, {}).get("user_messages", 0),
            found.get(day, {}).get("tokens", 0),
        )
        for day in days
    ]


def old_by_user(start: date, end: date) -> list[tuple[int, str, int, int, int, int]]:
    rows = (
        _old_messages(start, end)
        .values("conversation__owner_id", "conversation__owner__username")
        .annotate(
            conversations=Count("conversation_id", distinct=True),
            messages=Count("pk"),
            user_messages=Count("pk", filter=Q(role="user")),
            tokens=_old_tokens(),
        )
        .order_by("-tokens", "-messages", "conversation__owner_id")
    )
    return [
        (
            row["conversation__owner_id"],
            row["conversation__owner__username"],
            row["conversations"],
            row["messages"],
            row["user_messages"],
            row["tokens"],
        )
        for row in rows
    ]


def by_day(start: date = START, end: date = TODAY) -> list[tuple[date, int, int, int]]:
    return [astuple(day) for day in selectors.usage_by_day(start=start, end=end)]


def by_user(start: date = START, end: date = TODAY) -> list[tuple[int, str, int, int, int, int]]:
    return [astuple(user) for user in selectors.usage_by_user(start=start, end=end, limit=1000)]


def assert_same_as_before() -> None:
    """The rollup's figures equal the old aggregation's, over several ranges."""
    for start, end in [(START, TODAY), (TODAY, TODAY), (START, START + timedelta(days=2))]:
        assert by_day(start, end) == old_by_day(start, end)
        assert by_user(start, end) == old_by_user(start, end)


def rollup_rows() -> list[tuple]:
    return sorted(
        UsageDay.objects.values_list(
            "day",
            "owner_id",
            "conversation_id",
            "messages",
            "user_messages",
            "prompt_tokens",
            "completion_tokens",
            "total_tokens",
        )
    )


# --- a varied history ------------------------------------------------------------------


def at(days_ago: int, hour: int = 12, minute: int = 0, second: int = 0) -> datetime:
    return datetime.combine(TODAY - timedelta(days=days_ago), time(hour, minute, second), UTC)


def reply(tokens: int | None, when: datetime | None = None, **usage: object) -> NewMessage:
    counts = (
        {}
        if tokens is None
        else {"prompt_tokens": tokens - 1, "completion_tokens": 1, "total_tokens": tokens}
    )
    return NewMessage(
        role="assistant", content="ok", usage={**counts, **usage} or None, created_at=when
    )


@pytest.fixture
def history(owner, outsider) -> dict[str, Conversation]:
    bob = User.objects.create_user(username="bob", password="pw-bob-12345")
    # alice: a turn a day for three days, a tool call with its result, a reply without
    # usage, partial usage, a context event and a draft-edit notice today.
    work = chat(owner, "Work", turns=1)
    for days_ago in (3, 2, 1):
        services.messages_append(
            conversation=work,
            messages=[
                NewMessage(role="user", content="again", created_at=at(days_ago)),
                NewMessage(
                    role="assistant",
                    tool_calls=[{"id": "c1", "name": "calculator", "arguments": "{}"}],
                    usage={"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10},
                    created_at=at(days_ago, 12, 1),
                ),
                NewMessage(
                    role="tool",
                    tool_call_id="c1",
                    name="calculator",
                    content="4",
                    created_at=at(days_ago, 12, 2),
                ),
                reply(None, at(days_ago, 12, 3)),
            ],
        )
    services.message_append(conversation=work, message=reply(None, prompt_tokens=5))
    services.context_event_add(conversation=work, content="The user is in Lisbon.")
    services.conversation_draft_update(conversation=work, draft="A plan")
    services.user_message_append(conversation=work, content="Go on")
    services.message_append(conversation=work, message=reply(21))
    # Either side of midnight (UTC): two days.
    services.messages_append(
        conversation=work,
        messages=[
            NewMessage(role="user", content="late", created_at=at(4, 23, 59, 59)),
            reply(8, at(3, 0, 0, 0)),
        ],
    )
    # mallory: two conversations today, one of them a day earlier too.
    chat(outsider, "Trip", turns=2)
    other = chat(outsider, "Books", turns=1)
    services.messages_append(
        conversation=other,
        messages=[NewMessage(role="user", content="hi", created_at=at(1)), reply(40, at(1, 13))],
    )
    # bob: one big reply, then copies that must never count (an import carrying forged
    # usage, a fork of his own conversation).
    bobs = chat(bob, "Big", turns=1)
    services.message_append(conversation=bobs, message=reply(500))
    forged = exporting.export_json(bobs)
    forged["messages"][1]["usage"] = {"total_tokens": 9_000_000}
    imported = services.conversation_import(owner=owner, document=json.dumps(forged))
    fork = services.conversation_fork(conversation=bobs, at_seq=2)
    services.message_append(conversation=fork, message=reply(2))
    return {"work": work, "other": other, "bobs": bobs, "imported": imported, "fork": fork}


def test_the_rollup_gives_the_figures_the_messages_gave(history):
    assert UsageDay.objects.exists()
    assert_same_as_before()
    days = {day: rest for day, *rest in by_day()}
    assert days[TODAY - timedelta(days=4)] == [1, 1, 0]  # 23:59:59 counts on its own day
    users = {name: rest for _, name, *rest in by_user()}
    # Copies never count: alice's import and the fork's first two messages are left out.
    # bob: his conversation (a turn of 15 tokens, then 500) and the fork's own reply (2).
    assert users["bob"] == [2, 4, 1, 517]
    # The prompt and completion split is kept too, by the same rule.
    work = UsageDay.objects.filter(conversation_id=history["work"].pk)
    assert work.aggregate(p=Sum("prompt_tokens"), c=Sum("completion_tokens")) == {
        "p": 10 + 3 * 7 + 5 + 20 + 7,
        "c": 5 + 3 * 3 + 1 + 1,
    }


def test_the_dashboard_page_shows_the_rollup(history, moderator):
    response = client_for(moderator).get(
        USAGE, {"start": START.isoformat(), "end": TODAY.isoformat()}
    )
    assert response.status_code == 200
    days = old_by_day(START, TODAY)
    assert response.context["totals"] == {
        "messages": sum(d[1] for d in days),
        "user_messages": sum(d[2] for d in days),
        "tokens": sum(d[3] for d in days),
    }
    shown = [(u.username, u.tokens) for u in response.context["users"]]
    assert shown == [(name, tokens) for _, name, *_, tokens in old_by_user(START, TODAY)]


def test_new_messages_keep_it_current(history, owner):
    services.user_message_append(conversation=history["work"], content="More")
    services.message_append(conversation=history["work"], message=reply(1000))
    later = chat(owner, "New", turns=3)
    services.message_append(conversation=later, message=reply(None, at(2)))
    assert_same_as_before()


def test_a_message_rolled_back_never_counts(history):
    before = rollup_rows()

    def stored_then_undone() -> None:
        with transaction.atomic():
            services.message_append(conversation=history["work"], message=reply(77))
            raise RuntimeError("the run lost its lease")

    with pytest.raises(RuntimeError):
        stored_then_undone()
    assert rollup_rows() == before


def test_deleting_conversations_keeps_the_usage_they_had(history, moderator):
    """Spend that happened stays on the dashboard; the old aggregation lost it."""
    days, users = by_day(), by_user()
    services.conversation_delete(conversation=history["other"])
    services.conversations_delete(
        actor=moderator, queryset=Conversation.objects.filter(pk=history["bobs"].pk)
    )
    services.conversations_purge(days=0)  # retention off: nothing goes
    assert by_day() == days
    assert by_user() == users
    assert by_day() != old_by_day(START, TODAY)
    # A recount cannot see deleted messages, so it leaves their rows alone.
    services.usage_rebuild()
    assert (by_day(), by_user()) == (days, users)


def test_deleting_a_user_keeps_their_usage_in_the_daily_totals_only(history, moderator):
    days, users = by_day(), by_user()
    bob = User.objects.get(username="bob")
    services.user_delete(actor=moderator, user=bob)
    assert by_day() == days
    assert by_user() == [user for user in users if user[1] != "bob"]
    assert UsageDay.objects.filter(owner__isnull=True).exists()


def test_rebuild_and_the_migration_recount_from_the_messages(history):
    kept = rollup_rows()
    UsageDay.objects.update(messages=999, total_tokens=0)
    UsageDay.objects.filter(conversation_id=history["work"].pk).delete()
    out = StringIO()
    call_command("rebuild_usage", stdout=out, stderr=StringIO())
    assert "Recounted the usage of 6 conversation(s)" in out.getvalue()
    assert rollup_rows() == kept

    UsageDay.objects.all().delete()
    fill_migration.fill(apps, None)
    assert rollup_rows() == kept
    fill_migration.fill(apps, None)  # running it again changes nothing
    assert rollup_rows() == kept
    assert_same_as_before()


@pytest.mark.parametrize(
    "stored",
    [2**63 - 1, 10**30, 10**13, 10**13 - 1, -5, 1.5, 1e300, "12", "abc", True, {"n": 1}, [3], None],
)
def test_counts_no_sum_can_trust_count_as_not_reported(owner, outsider, stored):
    """A count that is not a sane whole number counts as nothing, whether it arrives with
    a new message or was already stored when the rollup was filled: the rule is the one
    the dashboard always applied to stored messages."""
    chat(owner, turns=1)  # 15 tokens
    odd = chat(outsider, turns=1)
    services.message_append(
        conversation=odd,
        message=NewMessage(
            role="assistant",
            content="odd",
            usage={"prompt_tokens": stored, "completion_tokens": stored, "total_tokens": stored},
        ),
    )
    assert_same_as_before()
    appended = rollup_rows()
    services.usage_rebuild()
    assert rollup_rows() == appended
