"""The engine enqueues a run's steps by task name: the names workers know must not move,
so steps queued before a deploy still route after it."""

from celery import current_app
from django.conf import settings

from conversations import tasks
from conversations.engine import dispatch

TASK_NAMES = {
    "conversations.tasks.run_step",
    "conversations.tasks.runs_watchdog",
    "conversations.tasks.conversations_purge",
    "conversations.tasks.files_orphans_sweep",
    "conversations.tasks.files_released_sweep",
}


def test_task_names_and_beat_entries_are_the_ones_workers_know():
    assert {
        tasks.run_step.name,
        tasks.runs_watchdog.name,
        tasks.conversations_purge.name,
        tasks.files_orphans_sweep.name,
        tasks.files_released_sweep.name,
    } == TASK_NAMES
    assert {entry["task"] for entry in settings.CELERY_BEAT_SCHEDULE.values()} <= TASK_NAMES
    assert tasks.run_step.name == dispatch.STEP_TASK


def test_a_step_is_sent_under_the_step_tasks_name(monkeypatch):
    sent: list[tuple[str, tuple, float]] = []

    def send_task(name, args=(), countdown=0, **options):
        sent.append((name, tuple(args), countdown))

    monkeypatch.setattr(current_app, "send_task", send_task)
    dispatch.step_enqueue("a-run", countdown=2)
    assert sent == [("conversations.tasks.run_step", ("a-run",), 2)]
    # The name resolves to the task a worker runs.
    assert current_app.tasks[sent[0][0]].name == tasks.run_step.name


def test_a_steps_message_shows_its_arguments_as_celery_would(monkeypatch):
    """The step's id is given to Celery already shown (cheaper than Celery's safe repr):
    logs and monitors read the same `argsrepr` and `kwargsrepr` as before."""
    from celery.utils.saferepr import saferepr

    sent: list[tuple[str, dict]] = []

    def send_task_message(producer, name, message, **options):
        sent.append((name, message.headers))

    monkeypatch.setattr(current_app.amqp, "send_task_message", send_task_message)
    dispatch.step_enqueue("0b7c1f52-4a0e-4a53-9d6e-8f0e1f1f2a3b")
    [(name, headers)] = sent
    assert name == dispatch.STEP_TASK
    assert headers["argsrepr"] == saferepr(("0b7c1f52-4a0e-4a53-9d6e-8f0e1f1f2a3b",))
    assert headers["kwargsrepr"] == saferepr({})
