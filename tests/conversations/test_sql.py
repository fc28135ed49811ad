"""Every hand-written statement of conversations (conversations/sql) agrees with its ORM
equivalent (tests/support/sql_orm/conversations.py) on the same rows: what it reads, which
rows it changes and the values it writes, edge cases included (no row, another user's row,
a lease held or stale, NULLs, JSON). Run on SQLite and on PostgreSQL."""

import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any

import pytest
from django.db import connection, transaction
from django.db.models import Model
from django.utils import timezone

from conversations import services, sql
from conversations.models import Branch, Conversation, Message, Run, UsageDay
from conversations.selectors.history import path_history
from conversations.services import NewMessage
from conversations.services.messages import LOCKED_FIELDS
from conversations.services.usage import usage_increments
from conversations.sql import runs as sql_runs
from tests.support.conversations import tool_call
from tests.support.sql_orm import conversations as sql_orm

pytestmark = pytest.mark.django_db


class _Undo(Exception):
    pass


def undone(work: Callable[[], Any]) -> Any:
    """What `work` returned, its writes rolled back: the other variant starts from the same
    rows."""
    try:
        with transaction.atomic():
            raise _Undo(work())
    except _Undo as undo:
        return undo.args[0]


def both(raw: Callable[[], Any], orm: Callable[[], Any], rows: Callable[[], Any]) -> list[Any]:
    """Each variant's result with the rows it left, from the same rows."""
    found = []
    for variant in (raw, orm):

        def work(variant: Callable[[], Any] = variant) -> Any:
            return variant(), rows()

        found.append(undone(work))
    return found


def loaded(instance: Model | None) -> dict[str, Any] | None:
    """The values an instance holds (its deferred fields left out), by attname."""
    if instance is None:
        return None
    deferred = instance.get_deferred_fields()
    fields = type(instance)._meta.concrete_fields
    return {f.attname: getattr(instance, f.attname) for f in fields if f.attname not in deferred}


def table(model: type[Model], **match: Any) -> list[dict[str, Any]]:
    rows = model._default_manager.filter(**match).values()
    if model is UsageDay:
        # A surrogate key, numbered as each database pleases: not what is counted.
        rows = rows.values(*(f.attname for f in UsageDay._meta.concrete_fields if f.name != "id"))
    return sorted(rows, key=str)


def run_make(conversation: Conversation, **fields: Any) -> Run:
    return Run.objects.create(
        conversation=conversation, branch_id=conversation.active_branch_id, **fields
    )


# --- the lock a run's start takes -------------------------------------------------------


def lock_both(conversation_id: uuid.UUID, owner_id: int, client_id: str) -> list[Any]:
    fields = (*LOCKED_FIELDS, "model")
    found: list[Any] = []
    for variant in (sql.conversation_run_lock, sql_orm.conversation_run_lock):
        with transaction.atomic():
            result = variant(
                conversation_id=conversation_id,
                owner_id=owner_id,
                client_id=client_id,
                fields=fields,
            )
        if result is not None:
            locked, run_active, client_id_taken = result
            found.append(
                (loaded(locked), locked.get_deferred_fields(), run_active, client_id_taken)
            )
        else:
            found.append(None)
    return found


def test_the_run_lock_reads_what_the_orm_reads(conversation, owner, outsider):
    services.conversation_draft_update(conversation=conversation, draft="A plan")
    raw, orm = lock_both(conversation.pk, owner.pk, "")
    assert raw == orm
    assert raw is not None
    assert raw[0]["draft"] == "A plan"
    assert (raw[2], raw[3]) == (False, False)
    assert "system_prompt" in raw[1]  # not asked for: deferred both ways

    run_make(conversation, client_id="first", status=Run.Status.COMPLETED)
    for client_id, taken in [("first", True), ("second", False), ("", False)]:
        raw, orm = lock_both(conversation.pk, owner.pk, client_id)
        assert raw == orm
        assert (raw[2], raw[3]) == (False, taken)

    run_make(conversation, client_id="second")  # queued: active
    raw, orm = lock_both(conversation.pk, owner.pk, "second")
    assert raw == orm
    assert (raw[2], raw[3]) == (True, True)

    # Another user's conversation, or none at all: nothing read either way.
    assert lock_both(conversation.pk, outsider.pk, "") == [None, None]
    assert lock_both(uuid.uuid4(), owner.pk, "") == [None, None]


# --- an append --------------------------------------------------------------------------


def test_a_branch_advance_moves_and_reads_what_the_orm_does(conversation, outsider):
    branch = Branch.objects.get(conversation=conversation)
    other = services.conversation_create(owner=outsider)

    def rows() -> Any:
        return table(Branch)

    for key, conversation_id in [
        (branch.pk, conversation.pk),
        (branch.pk, other.pk),  # not that conversation's branch
        (uuid.uuid4(), conversation.pk),  # no such branch
    ]:
        arguments = {"branch_id": key, "conversation_id": conversation_id, "by": 2}
        raw, orm = both(
            partial(sql.branch_count_advance, **arguments),
            partial(sql_orm.branch_count_advance, **arguments),
            rows,
        )
        assert (loaded(raw[0]), raw[1]) == (loaded(orm[0]), orm[1])
    advanced = undone(
        lambda: (
            sql.branch_count_advance(branch_id=branch.pk, conversation_id=conversation.pk, by=2),
            rows(),
        )
    )
    assert advanced[0].message_count == 2
    assert [row["message_count"] for row in advanced[1] if row["id"] == branch.pk] == [2]


def append_rows(conversation: Conversation, branch: Branch, new: list[NewMessage]) -> list[Message]:
    at = datetime(2026, 3, 1, 23, 59, 59, tzinfo=UTC)
    return [
        sql.message_new(
            values={
                **vars(message),
                "id": uuid.UUID(int=seq + 1),
                "conversation_id": conversation.pk,
                "branch_id": branch.pk,
                "seq": branch.message_count + seq + 1,
                # The last one a day later: two days' usage rows.
                "created_at": at + timedelta(seconds=seq),
            }
        )
        for seq, message in enumerate(new)
    ]


def test_an_append_writes_what_the_orm_writes(conversation, owner):
    branch = Branch.objects.get(conversation=conversation)
    new = [
        NewMessage(role=Message.Role.USER, content="What is 2+2?"),
        NewMessage(
            role=Message.Role.ASSISTANT,
            tool_calls=[tool_call("c1", arguments='{"expression": "2+2", "note": "é\\u0000"}')],
            usage={"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
            provider_payload={"system_fingerprint": "fp", "nested": {"list": [1, None, "x"]}},
            reasoning="Add them.",
            reasoning_ms=120,
        ),
        NewMessage(role=Message.Role.TOOL, content="4", tool_call_id="c1", name="calculator"),
        # NULL JSON and a usage that is not an object count nothing.
        NewMessage(role=Message.Role.ASSISTANT, content="4.", usage=None, provider_payload=None),
    ]
    rows = append_rows(conversation, branch, new)

    def state() -> Any:
        return (
            table(Message, conversation=conversation),
            table(UsageDay, conversation_id=conversation.pk),
            table(Branch, conversation=conversation),
            table(Conversation, pk=conversation.pk),
            # SQL NULL, not JSON null.
            Message.objects.filter(usage__isnull=True, provider_payload__isnull=True).count(),
        )

    for branch_count in [None, (branch.pk, 4)]:
        values = {"message_count": 4, "last_activity_at": rows[-1].created_at, "title": "Sums"}
        if branch_count is None:
            values["active_branch_id"] = None  # a NULL written
        arguments = {
            "messages": rows,
            "usage": usage_increments(
                owner_id=owner.pk, conversation_id=conversation.pk, messages=rows
            ),
            "branch_count": branch_count,
            "conversation_id": conversation.pk,
            "conversation_values": values,
        }
        raw, orm = both(
            partial(sql.messages_append_write, **arguments),
            partial(sql_orm.messages_append_write, **arguments),
            state,
        )
        assert raw == orm
        messages, usage, branches, conversations, nulls = raw[1]
        assert [m["seq"] for m in messages] == [1, 2, 3, 4]
        assert nulls == 3
        assert sorted((u["messages"], u["completion_tokens"]) for u in usage) == [(1, 0), (3, 5)]
        assert branches[0]["message_count"] == (0 if branch_count is None else 4)
        assert conversations[0]["title"] == "Sums"

    # Into a day that already has its row: the counts are added to it, both ways.
    services.messages_append(
        conversation=conversation,
        messages=[
            NewMessage(role=Message.Role.USER, content="earlier", created_at=rows[0].created_at)
        ],
    )
    branch.refresh_from_db()
    later = append_rows(conversation, branch, new[:2])
    arguments = {
        "messages": later,
        "usage": usage_increments(
            owner_id=owner.pk, conversation_id=conversation.pk, messages=later
        ),
        "branch_count": (branch.pk, 3),
        "conversation_id": conversation.pk,
        "conversation_values": {"message_count": 3},
    }
    raw, orm = both(
        lambda: sql.messages_append_write(**arguments),
        lambda: sql_orm.messages_append_write(**arguments),
        state,
    )
    assert raw == orm
    assert sorted(u["messages"] for u in raw[1][1]) == [1, 2]


# --- a step's lease ---------------------------------------------------------------------


def taken_fields(run: Run | None) -> Any:
    if run is None:
        return None
    conversation = run.conversation
    branch = run.branch if run.branch_id is not None else None
    return loaded(run), loaded(conversation), loaded(conversation.owner), loaded(branch)


def test_a_lease_is_taken_as_the_orm_takes_it(conversation, outsider):
    run = run_make(conversation)
    no_branch = run_make(services.conversation_create(owner=outsider))
    Run.objects.filter(pk=no_branch.pk).update(branch=None)
    now = timezone.now()
    token, until = uuid.uuid4(), now + timedelta(seconds=30)

    def rows() -> Any:
        return table(Run)

    def take(key: Any) -> list[Any]:
        return both(
            lambda: taken_fields(sql.run_lease_take(run_id=key, token=token, now=now, until=until)),
            lambda: taken_fields(
                sql_orm.run_lease_take(run_id=key, token=token, now=now, until=until)
            ),
            rows,
        )

    held = Run.objects.filter(pk=run.pk)
    cases: list[tuple[str, Callable[[], object], bool]] = [
        ("never taken", lambda: None, True),
        ("a run without a branch", lambda: None, True),
        ("held", lambda: held.update(lease_expires_at=now + timedelta(seconds=5)), False),
        (
            "stale, started before",
            lambda: held.update(
                lease_expires_at=now - timedelta(seconds=1),
                status=Run.Status.IN_PROGRESS,
                started_at=now - timedelta(minutes=1),
                attempt=2,
            ),
            True,
        ),
        (
            "ended",
            lambda: held.update(status=Run.Status.COMPLETED, lease_expires_at=None),
            False,
        ),
    ]
    for name, arrange, expected in cases:
        arrange()
        key = no_branch.pk if name == "a run without a branch" else str(run.pk)
        raw, orm = take(key)
        assert raw == orm, name
        assert (raw[0] is not None) == expected, name
    assert take(uuid.uuid4()) == [(None, table(Run))] * 2

    # What a take writes: in progress, the attempt counted, started now.
    held.update(status=Run.Status.IN_PROGRESS, lease_expires_at=None, started_at=None, attempt=0)
    raw, _ = take(str(run.pk))
    assert (raw[0][0]["status"], raw[0][0]["attempt"], raw[0][0]["started_at"]) == (
        Run.Status.IN_PROGRESS,
        1,
        now,
    )
    assert raw[0][3]["id"] == conversation.active_branch_id


def test_leases_are_renewed_as_the_orm_renews_them(owner, monkeypatch):
    now = timezone.now()
    leases: list[tuple[uuid.UUID, uuid.UUID]] = []
    for n in range(5):
        conversation = services.conversation_create(owner=owner, title=f"c{n}")
        token = uuid.uuid4()
        run = run_make(conversation, status=Run.Status.IN_PROGRESS, lease_token=token)
        leases.append((run.pk, token))
    # One asked to stop, one taken over by another step, one gone.
    Run.objects.filter(pk=leases[1][0]).update(cancel_requested_at=now)
    Run.objects.filter(pk=leases[2][0]).update(lease_token=uuid.uuid4())
    leases.append((uuid.uuid4(), uuid.uuid4()))
    until = now + timedelta(seconds=30)

    def rows() -> Any:
        return table(Run)

    for batch in (sql_runs.RENEW_BATCH, 2):  # across several statements too
        monkeypatch.setattr(sql_runs, "RENEW_BATCH", batch)
        raw, orm = both(
            lambda: sorted(sql.run_leases_renew(leases=leases, until=until)),
            lambda: sorted(sql_orm.run_leases_renew(leases=leases, until=until)),
            rows,
        )
        assert raw == orm
        assert raw[0] == sorted(
            [(leases[0][0], False), (leases[1][0], True), *[(leases[n][0], False) for n in (3, 4)]]
        )
        assert sum(row["lease_expires_at"] == until for row in raw[1]) == 4
    assert sql.run_leases_renew(leases=[], until=until) == []


# --- the model's history ----------------------------------------------------------------


def test_the_history_read_is_the_orms_along_every_range(conversation):
    services.messages_append(
        conversation=conversation,
        messages=[
            NewMessage(role=Message.Role.USER, content="one"),
            NewMessage(
                role=Message.Role.ASSISTANT,
                tool_calls=[
                    tool_call("c1", arguments='{"q": "ünï \\"quoted\\""}'),
                    tool_call("c2"),
                ],
            ),
            NewMessage(role=Message.Role.TOOL, content="2", tool_call_id="c1", name="calculator"),
            NewMessage(role=Message.Role.TOOL, content="", tool_call_id="c2", name="calculator"),
        ],
    )
    root = Branch.objects.get(conversation=conversation)
    fork = services.branch_fork(conversation=conversation, source=root, fork_seq=3)
    services.messages_append(
        conversation=conversation,
        branch_id=fork.pk,
        messages=[NewMessage(role=Message.Role.ASSISTANT, content="It is 2.")],
    )
    fork.refresh_from_db()
    for after, last in [(0, 4), (0, 3), (2, 4), (3, 4), (4, 4), (0, 0)]:
        raw = path_history(fork, after=after, last=last)
        assert raw == sql_orm.path_history_read(branch=fork, after=after, last=last)
    history = path_history(fork, after=0, last=4)
    assert [row.content for row in history] == ["one", "", "2", "It is 2."]
    assert history[1].tool_calls[0]["arguments"] == '{"q": "ünï \\"quoted\\""}'
    assert history[0].tool_calls == []


# --- search -----------------------------------------------------------------------------


@pytest.mark.skipif(connection.vendor != "postgresql", reason="the column is PostgreSQL's")
def test_the_search_column_matches_what_its_content_says(conversation):
    services.messages_append(
        conversation=conversation,
        messages=[
            NewMessage(role=Message.Role.USER, content="Running the quarterly reports"),
            NewMessage(role=Message.Role.ASSISTANT, content="The report ran fine."),
            NewMessage(role=Message.Role.USER, content="Cats and dogs"),
        ],
    )
    from conversations.selectors.search import _query

    def matching(text: str, vector: Any) -> set[str]:
        found = Message.objects.alias(fts=vector).filter(fts=_query(text))
        return set(found.values_list("content", flat=True))

    for text in ("report", "run", "cats -dogs", '"quarterly reports"', "nothing"):
        stored = matching(text, sql.message_search_vector())
        assert stored == matching(text, sql_orm.message_search_vector()), text
    assert len(matching("report", sql.message_search_vector())) == 2
