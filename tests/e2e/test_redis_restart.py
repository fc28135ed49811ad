"""The Redis server restarted while replies stream: the worker reconnects and stays up,
and every run ends completed (its streamed text equal to the stored one) or failed with a
clear code; none stays active after the watchdog's next sweep."""

import time

import pytest

from conversations import engine
from conversations.engine import eventlog, watchdog
from conversations.models import Message, Run
from tests.support.fake_openai import FakeOpenAI, Script
from tests.support.faults import RestartableRedis, procfile_worker, redis_switched
from tests.support.waiting import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

STORY = "Once upon a time a worker kept on streaming through the storm. " * 4


@pytest.fixture
def own_redis():
    server = RestartableRedis()
    server.start()
    with redis_switched(server.url):
        yield server
    server.stop()


def test_a_redis_restart_mid_stream_leaves_the_worker_up_and_no_run_stuck(
    own_redis, fake_openai: FakeOpenAI, chat
):
    worker = procfile_worker(
        redis_url=own_redis.url,
        env={
            "OPENAI_API_KEY": "test-key",
            "OPENAI_BASE_URL": fake_openai.base_url,
            "OPENAI_MAX_RETRIES": "0",
            "PARLEY_RUN_LEASE_SECONDS": "3",
        },
    )
    try:
        fake_openai.default_script = Script(text=STORY, tokens_per_second=40)
        runs = []
        for index in range(5):
            conversation = chat if index == 0 else type(chat).objects.create(owner=chat.owner)
            runs.append(engine.run_start(conversation=conversation, content=f"Story {index}")[1])
        wait_until(
            lambda: all(Run.objects.get(pk=r.pk).started_at for r in runs),
            what="every run to start", timeout=30,
        )  # fmt: skip
        time.sleep(0.5)
        own_redis.restart(down_seconds=2)

        def settled() -> bool:
            assert worker.process.poll() is None, f"the worker exited:\n{worker.log()[-6000:]}"
            watchdog.runs_watchdog()
            return not Run.objects.filter(
                pk__in=[r.pk for r in runs], status__in=Run.ACTIVE_STATUSES
            ).exists()

        wait_until(settled, what="every run to end", timeout=90, interval=1,
                   details=lambda: worker.log()[-6000:])  # fmt: skip
        time.sleep(3)
        assert worker.process.poll() is None, worker.log()[-6000:]
        for run in runs:
            run.refresh_from_db()
            assert run.status in (Run.Status.COMPLETED, Run.Status.FAILED), run.status
            if run.status == Run.Status.FAILED:
                assert (run.error or {}).get("code"), run.error
                continue
            reply = Message.objects.get(run=run, role="assistant")
            assert reply.content == STORY
            log = eventlog.events_all(str(run.id))
            if log and log[-1]["type"] == "run.completed":
                assert eventlog.message_texts(log)[str(reply.id)] == reply.content
    finally:
        worker.stop()
