"""Branches through the engine: regenerate, edit and switch, with real runs against the
fake upstream behind the real SDK. What the user sees: which messages a path holds, the
alternatives at each fork point, and what the model is sent on each branch."""

import json
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from conversations import engine, selectors, services
from conversations.engine import watchdog
from conversations.errors import QuotaExceeded, RunActive, ValidationFailed
from conversations.models import Branch, Conversation, Message, Run
from tests.support.fake_openai import FakeOpenAI, Script
from tests.support.steps import run_to_end

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def model(upstream: FakeOpenAI, redis_url: str) -> FakeOpenAI:
    return upstream


def ask(conversation: Conversation, text: str, model: FakeOpenAI, enqueued, reply: str) -> Run:
    model.push(Script(text=reply))
    _, run = engine.run_start(conversation=conversation, content=text)
    return run_to_end(run, enqueued)


def path(conversation: Conversation, branch_id: Any = None) -> list[str]:
    conversation.refresh_from_db()
    branch = selectors.branch_get(conversation=conversation, branch_id=branch_id)
    return [m.content for m in selectors.path_messages(branch, after=0, last=branch.message_count)]


def page(conversation: Conversation, branch_id: Any = None) -> list[dict[str, Any]]:
    conversation.refresh_from_db()
    branch = selectors.branch_get(conversation=conversation, branch_id=branch_id)
    return selectors.message_rows_page(conversation=conversation, branch=branch, limit=200).items


def reply_of(run: Run | None) -> Message:
    assert run is not None
    return Message.objects.filter(run=run, role="assistant").order_by("-seq")[0]


@pytest.fixture
def chatted(conversation, model, enqueued) -> Conversation:
    """Two finished turns: u1 a2 u3 a4."""
    ask(conversation, "What is a cat?", model, enqueued, "A small feline.")
    ask(conversation, "And a dog?", model, enqueued, "A loyal canine.")
    return conversation


def test_regenerate_answers_again_on_a_new_branch_and_keeps_the_old_reply(chatted, model, enqueued):
    first = reply_of(Run.objects.filter(conversation=chatted).order_by("created_at").last())
    model.push(Script(text="A domesticated wolf."))

    branch, run = engine.reply_regenerate(conversation=chatted, message_id=first.pk)
    run_to_end(run, enqueued)

    root = Branch.objects.get(conversation=chatted, parent__isnull=True)
    assert run.status == Run.Status.COMPLETED
    assert run.branch_id == branch.pk
    assert (branch.fork_seq, branch.parent_id) == (3, root.pk)
    assert path(chatted) == [
        "What is a cat?",
        "A small feline.",
        "And a dog?",
        "A domesticated wolf.",
    ]
    assert path(chatted, root.pk)[-1] == "A loyal canine."
    # The model was asked the same question again, without the old answer.
    sent = [m["content"] for m in model.requests[-1].messages]
    assert sent[-1] == "And a dog?"
    assert "A loyal canine." not in sent
    # Both versions carry their alternatives, so a client draws < 1/2 > and < 2/2 >.
    new, old = page(chatted)[-1], page(chatted, root.pk)[-1]
    ids = [str(root.pk), str(branch.pk)]
    assert new["alternatives"] == {"index": 1, "count": 2, "branch_ids": ids}
    assert old["alternatives"] == {"index": 0, "count": 2, "branch_ids": ids}
    assert all(m["alternatives"] is None for m in page(chatted)[:-1])
    chatted.refresh_from_db()
    assert (chatted.active_branch_id, chatted.branch_count, chatted.message_count) == (
        branch.pk,
        2,
        5,
    )


def test_regenerating_again_adds_a_third_sibling_at_the_same_fork_point(chatted, model, enqueued):
    for text in ("Second.", "Third."):
        model.push(Script(text=text))
        last = reply_of(Run.objects.filter(conversation=chatted).order_by("created_at").last())
        _, run = engine.reply_regenerate(conversation=chatted, message_id=last.pk)
        run_to_end(run, enqueued)

    root = Branch.objects.get(conversation=chatted, parent__isnull=True)
    children = Branch.objects.filter(parent=root)
    # Regenerating the second version forks from the root too: one fork point, 3 choices.
    assert sorted(b.fork_seq for b in children) == [3, 3]
    assert page(chatted)[-1]["alternatives"]["count"] == 3
    assert page(chatted)[-1]["alternatives"]["index"] == 2


def test_edit_forks_before_the_message_and_answers_the_new_text(chatted, model, enqueued):
    question = Message.objects.get(conversation=chatted, seq=3)
    model.push(Script(text="A bird that sings."))

    branch, edited, run = engine.message_edit(
        conversation=chatted, message_id=question.pk, content="And a canary?"
    )
    run_to_end(run, enqueued)

    assert (branch.fork_seq, edited.seq, edited.branch_id) == (2, 3, branch.pk)
    assert path(chatted) == [
        "What is a cat?",
        "A small feline.",
        "And a canary?",
        "A bird that sings.",
    ]
    assert page(chatted)[2]["alternatives"]["count"] == 2
    assert page(chatted)[3]["alternatives"] is None
    assert [m["content"] for m in model.requests[-1].messages][-1] == "And a canary?"


def test_editing_the_first_message_forks_at_zero_from_the_root(chatted, model, enqueued):
    first = Message.objects.get(conversation=chatted, seq=1)
    model.push(Script(text="A large feline."))

    branch, _, run = engine.message_edit(
        conversation=chatted, message_id=first.pk, content="What is a lion?"
    )
    run_to_end(run, enqueued)

    assert branch.fork_seq == 0
    assert branch.parent_id is not None
    assert path(chatted) == ["What is a lion?", "A large feline."]
    assert page(chatted)[0]["alternatives"]["index"] == 1
    # Only the preamble and the new question went to the model.
    assert [m["content"] for m in model.requests[-1].messages] == ["What is a lion?"]


def test_switching_shows_another_path_and_new_messages_follow_it(chatted, model, enqueued):
    root = chatted.active_branch_id
    last = reply_of(Run.objects.filter(conversation=chatted).order_by("created_at").last())
    model.push(Script(text="Another answer."))
    branch, run = engine.reply_regenerate(conversation=chatted, message_id=last.pk)
    run_to_end(run, enqueued)

    services.branch_switch(conversation=chatted, branch_id=root)
    assert path(chatted)[-1] == "A loyal canine."
    ask(chatted, "Thanks!", model, enqueued, "You're welcome.")

    assert path(chatted)[-2:] == ["Thanks!", "You're welcome."]
    assert path(chatted, branch.pk)[-1] == "Another answer."
    sent = [m["content"] for m in model.requests[-1].messages]
    assert "A loyal canine." in sent
    assert "Another answer." not in sent


def test_a_message_sent_to_a_named_branch_goes_there_and_makes_it_active(chatted, model, enqueued):
    root = chatted.active_branch_id
    last = reply_of(Run.objects.filter(conversation=chatted).order_by("created_at").last())
    model.push(Script(text="Another answer."))
    _, run = engine.reply_regenerate(conversation=chatted, message_id=last.pk)
    run_to_end(run, enqueued)

    model.push(Script(text="On the first line."))
    message, run = engine.run_start(conversation=chatted, content="Back here", branch_id=root)
    run_to_end(run, enqueued)

    assert (message.branch_id, message.seq) == (root, 5)
    chatted.refresh_from_db()
    assert chatted.active_branch_id == root
    assert path(chatted)[-2:] == ["Back here", "On the first line."]


def test_a_branch_change_is_refused_while_a_reply_is_generated(chatted, model, enqueued):
    last = reply_of(Run.objects.filter(conversation=chatted).order_by("created_at").last())
    _, running = engine.run_start(conversation=chatted, content="Still there?")
    before = (Branch.objects.count(), Message.objects.count())

    with pytest.raises(RunActive):
        engine.reply_regenerate(conversation=chatted, message_id=last.pk)
    question = Message.objects.get(conversation=chatted, seq=3)
    with pytest.raises(RunActive):
        engine.message_edit(conversation=chatted, message_id=question.pk, content="x")
    other = services.branch_fork(
        conversation=chatted, source=Branch.objects.get(pk=chatted.active_branch_id), fork_seq=2
    )
    with pytest.raises(RunActive):
        services.branch_switch(conversation=chatted, branch_id=other.pk)

    assert (Branch.objects.count(), Message.objects.count()) == (before[0] + 1, before[1])
    engine.run_cancel(run=running)


def test_only_replies_regenerate_and_only_user_messages_edit(chatted):
    question = Message.objects.get(conversation=chatted, seq=3)
    answer = Message.objects.get(conversation=chatted, seq=4)
    with pytest.raises(ValidationFailed):
        engine.reply_regenerate(conversation=chatted, message_id=question.pk)
    with pytest.raises(ValidationFailed):
        engine.message_edit(conversation=chatted, message_id=answer.pk, content="x")
    with pytest.raises(ValidationFailed):
        engine.message_edit(conversation=chatted, message_id=question.pk, content="  ")
    assert Branch.objects.filter(conversation=chatted).count() == 1
    assert not Run.objects.filter(conversation=chatted, status="queued").exists()


def test_another_conversations_message_is_not_found(chatted, owner):
    other = services.conversation_create(owner=owner)
    answer = Message.objects.get(conversation=chatted, seq=4)
    with pytest.raises(Message.DoesNotExist):
        engine.reply_regenerate(conversation=other, message_id=answer.pk)
    with pytest.raises(Message.DoesNotExist):
        engine.message_edit(conversation=other, message_id="not-a-uuid", content="x")
    with pytest.raises(Branch.DoesNotExist):
        services.branch_switch(conversation=other, branch_id=chatted.active_branch_id)


def test_tool_calls_and_draft_notices_behave_on_a_branch_as_on_a_line(chatted, model, enqueued):
    services.conversation_draft_update(conversation=chatted, draft="Dear team,")
    question = Message.objects.get(conversation=chatted, seq=3)
    model.push(
        Script(tool_calls=[("call_1", "calculator", json.dumps({"expression": "6*7"}))]),
        Script(text="It is 42."),
    )

    branch, _, run = engine.message_edit(
        conversation=chatted, message_id=question.pk, content="What is 6*7?"
    )
    run_to_end(run, enqueued)

    branch.refresh_from_db()
    rows = list(selectors.path_messages(branch, after=2, last=10))
    assert [(m.role, m.kind) for m in rows] == [
        ("user", "message"),
        ("system", "draft_edit"),
        ("assistant", "message"),
        ("tool", "message"),
        ("assistant", "message"),
    ]
    assert rows[3].content == "42"
    assert rows[-1].content == "It is 42."
    first_call, second_call = model.requests[-2].messages, model.requests[-1].messages
    draft = {"role": "system", "content": '[current draft: "Dear team,"]'}
    assert first_call[-3:] == [
        {"role": "user", "content": "What is 6*7?"},
        {"role": "system", "content": '[user edited the draft to: "Dear team,"]'},
        draft,
    ]
    # The earlier answers on the other line are not part of this path.
    assert "A loyal canine." not in [m.get("content") for m in first_call]
    assert [m["role"] for m in second_call[-4:]] == ["system", "assistant", "tool", "system"]
    assert second_call[-2] == {"role": "tool", "tool_call_id": "call_1", "content": "42"}
    chatted.refresh_from_db()
    assert not chatted.draft_edited


def test_a_context_event_goes_on_the_active_branch(chatted, model, enqueued):
    last = reply_of(Run.objects.filter(conversation=chatted).order_by("created_at").last())
    model.push(Script(text="Regenerated."))
    branch, run = engine.reply_regenerate(conversation=chatted, message_id=last.pk)
    run_to_end(run, enqueued)

    event = services.context_event_add(conversation=chatted, content="User opened the map")

    assert (event.branch_id, event.seq) == (branch.pk, 5)
    assert path(chatted)[-1] == "User opened the map"


def test_a_run_on_a_branch_recovers_after_its_worker_died(chatted, model, enqueued):
    last = reply_of(Run.objects.filter(conversation=chatted).order_by("created_at").last())
    branch, run = engine.reply_regenerate(conversation=chatted, message_id=last.pk)
    # A worker took the run and died mid-step: its lease expires, nothing was stored.
    Run.objects.filter(pk=run.pk).update(
        status=Run.Status.IN_PROGRESS,
        lease_token=None,
        lease_expires_at=timezone.now() - timedelta(seconds=1),
        attempt=1,
    )
    enqueued.clear()
    assert watchdog.runs_watchdog()["expired"] == 1
    model.push(Script(text="Recovered answer."))

    run_to_end(run, enqueued)

    assert run.status == Run.Status.COMPLETED
    assert path(chatted, branch.pk)[-1] == "Recovered answer."
    assert reply_of(run).branch_id == branch.pk


def test_regenerating_counts_against_the_daily_message_quota(chatted, model, enqueued, settings):
    settings.PARLEY_MAX_MESSAGES_PER_DAY = 1  # set after the two questions: counts from here
    last = reply_of(Run.objects.filter(conversation=chatted).order_by("created_at").last())
    model.push(Script(text="A faithful friend."))
    _, run = engine.reply_regenerate(conversation=chatted, message_id=last.pk)
    run_to_end(run, enqueued)
    branches, runs = Branch.objects.count(), Run.objects.count()

    with pytest.raises(QuotaExceeded) as refused:
        engine.reply_regenerate(conversation=chatted, message_id=last.pk)
    assert refused.value.code == "message_quota_exceeded"
    # Refused whole: no branch forked, no run, the shown version unchanged.
    assert (Branch.objects.count(), Run.objects.count()) == (branches, runs)
    assert path(chatted)[-1] == "A faithful friend."
