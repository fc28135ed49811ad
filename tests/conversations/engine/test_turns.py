"""Turns for a worker's step threads (conversations.engine.turns)."""

import random
import threading
import time

import pytest

from conversations.engine.turns import Turns
from tests.support.threads import run_threads


def test_no_more_threads_work_at_once_than_the_setting_allows(settings):
    settings.PARLEY_WORKER_BUSY_STEPS = 2
    turns = Turns()
    inside, most = 0, 0
    lock = threading.Lock()

    def work() -> None:
        nonlocal inside, most
        with turns.taken():
            with lock:
                inside += 1
                most = max(most, inside)
            time.sleep(0.02)
            with lock:
                inside -= 1

    run_threads(*[work] * 8)
    assert most == 2


def test_a_thread_waiting_on_the_model_lets_another_work(settings):
    settings.PARLEY_WORKER_BUSY_STEPS = 1
    turns = Turns()
    streaming, other_done = threading.Event(), threading.Event()

    def streaming_step() -> None:
        with turns.taken(), turns.given_back():
            streaming.set()
            # The other step gets the only turn while this one waits.
            assert other_done.wait(timeout=5)

    def other_step() -> None:
        assert streaming.wait(timeout=5)
        with turns.taken():
            other_done.set()

    run_threads(streaming_step, other_step)
    assert other_done.is_set()


def test_leases_go_before_the_longer_work(settings):
    settings.PARLEY_WORKER_BUSY_STEPS = 1
    turns = Turns()
    order: list[str] = []
    holding = threading.Event()
    release = threading.Event()

    def holder() -> None:
        with turns.taken():
            holding.set()
            assert release.wait(timeout=5)

    def waiter(name: str, urgent: bool) -> None:
        with turns.taken(urgent=urgent):
            order.append(name)

    first = threading.Thread(target=holder)
    first.start()
    assert holding.wait(timeout=5)
    normal = threading.Thread(target=waiter, args=("work", False))
    normal.start()
    time.sleep(0.05)  # the ordinary step waits first...
    urgent = threading.Thread(target=waiter, args=("lease", True))
    urgent.start()
    time.sleep(0.05)
    release.set()  # ...yet the lease gets the turn first
    for thread in (first, normal, urgent):
        thread.join(timeout=5)
    assert order == ["lease", "work"]


def test_a_step_run_inside_another_keeps_its_turn(settings):
    # Eager Celery runs the next step inside the current one's thread.
    settings.PARLEY_WORKER_BUSY_STEPS = 1
    turns = Turns()
    reached = []

    def nested() -> None:
        with turns.taken():
            with turns.taken(urgent=True):
                with turns.given_back():
                    reached.append("waiting on the model")
                reached.append("inner")
            reached.append("outer")
        with turns.taken():  # and the turn is free again afterwards
            reached.append("again")

    run_threads(nested)
    assert reached == ["waiting on the model", "inner", "outer", "again"]


@pytest.mark.parametrize("busy", [0, -3])
def test_a_setting_below_one_still_lets_one_step_work(settings, busy):
    settings.PARLEY_WORKER_BUSY_STEPS = busy
    turns = Turns()
    done = []

    def work() -> None:
        with turns.taken():
            done.append(1)

    run_threads(work, work)
    assert done == [1, 1]


@pytest.mark.parametrize("busy", [1, 2, 3])
def test_many_steps_leasing_working_and_waiting_all_get_through(settings, busy):
    # The worker's pattern under a burst: a lease (urgent), then work, a wait on the model
    # with the turn given back, then more work. No wake-up may be lost on the way.
    settings.PARLEY_WORKER_BUSY_STEPS = busy
    turns = Turns()
    inside, most, finished = 0, 0, 0
    lock = threading.Lock()

    def busy_for(seconds: float) -> None:
        nonlocal inside, most
        with lock:
            inside += 1
            most = max(most, inside)
        time.sleep(seconds)
        with lock:
            inside -= 1

    def step(seed: int) -> None:
        nonlocal finished
        pick = random.Random(seed)
        time.sleep(pick.random() * 0.02)
        with turns.taken(urgent=True):
            busy_for(pick.random() * 0.002)
        with turns.taken():
            busy_for(pick.random() * 0.002)
            with turns.given_back():
                time.sleep(pick.random() * 0.01)
            busy_for(pick.random() * 0.002)
        with lock:
            finished += 1

    run_threads(*(lambda seed=seed: step(seed) for seed in range(120)))
    assert finished == 120
    assert most <= busy


def test_two_turns_freed_at_once_go_to_both_kinds_of_waiter(settings):
    # Both releases can reach the same urgent waiter before it runs; the second turn must
    # still reach the ordinary waiter, which the urgent one here waits for.
    settings.PARLEY_WORKER_BUSY_STEPS = 2
    turns = Turns()
    turns._acquire(urgent=False)
    turns._acquire(urgent=False)
    ordinary_in = threading.Event()
    seen: list[bool] = []

    def ordinary() -> None:
        with turns.taken():
            ordinary_in.set()

    def urgent() -> None:
        with turns.taken(urgent=True):
            seen.append(ordinary_in.wait(timeout=3))  # False: the second free turn was lost

    waiting = [threading.Thread(target=ordinary)]
    waiting[0].start()
    time.sleep(0.05)
    waiting.append(threading.Thread(target=urgent))
    waiting[1].start()
    time.sleep(0.05)
    turns._release()
    turns._release()
    for thread in waiting:
        thread.join(timeout=10)
    assert seen == [True]
