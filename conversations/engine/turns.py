"""Turns for a worker's step threads (see Turns)."""

import contextlib
import threading
from collections.abc import Callable, Iterator

from django.conf import settings


class Turns:
    """Step threads take turns for their database and bookkeeping work.

    A thread-pool worker runs a thread per step, and a burst of new runs makes dozens of
    them busy at once. They share one GIL with the streaming loop, which then waits behind
    all of them: replies already streaming stall for hundreds of ms. With at most
    PARLEY_WORKER_BUSY_STEPS threads working at a time (the others sleep off the GIL),
    the loop is never far from its turn. A thread gives its turn back while it waits on
    the model or runs a tool.

    Leases go first: taking a run is short, and a run taken shows as in progress at once,
    while the longer work queues behind (`requeue`). Re-entrant: a step run inline inside
    another (eager Celery in tests) keeps the turn it has.
    """

    def __init__(self) -> None:
        lock = threading.Lock()
        self._urgent = threading.Condition(lock)
        self._normal = threading.Condition(lock)
        self._busy = 0
        self._urgent_waiting = 0
        self._normal_waiting = 0
        self._local = threading.local()

    def _free(self) -> bool:
        return self._busy < max(1, settings.PARLEY_WORKER_BUSY_STEPS)  # tests change it

    def _acquire(self, *, urgent: bool) -> None:
        with self._urgent:  # the lock both conditions share
            if urgent:
                self._urgent_waiting += 1
                try:
                    while not self._free():
                        self._urgent.wait()
                finally:
                    self._urgent_waiting -= 1
            else:
                self._normal_waiting += 1
                try:
                    while not self._free() or self._urgent_waiting:
                        self._normal.wait()
                finally:
                    self._normal_waiting -= 1
            self._busy += 1
            # A wake-up may have gone to a thread that found no turn free after all (two
            # releases can notify the same urgent waiter): pass it on while turns are left.
            self._wake_one()

    def _release(self) -> None:
        with self._urgent:
            self._busy -= 1
            self._wake_one()

    def _wake_one(self) -> None:
        # One waiter, not all: a herd of threads waking for one turn is the GIL contention
        # this class is here to avoid.
        if not self._free():
            return
        if self._urgent_waiting:
            self._urgent.notify()
        else:
            self._normal.notify()

    @contextlib.contextmanager
    def taken(self, *, urgent: bool = False) -> Iterator[None]:
        if getattr(self._local, "held", False):
            yield
            return
        self._acquire(urgent=urgent)
        self._local.held = True
        try:
            yield
        finally:
            self._local.held = False
            self._release()

    def requeue(self, *, before: Callable[[], None]) -> None:
        """Inside `taken()`: if other threads wait for a turn, run `before` (to give the
        database connection back), give this turn back and wait for an ordinary one; if
        none waits, keep the turn and go straight on, as if it had been given back and
        taken again at once."""
        if not getattr(self._local, "held", False):
            return
        with self._urgent:
            if not (self._urgent_waiting or self._normal_waiting):
                return
        before()
        self._local.held = False
        self._release()
        self._acquire(urgent=False)
        self._local.held = True

    @contextlib.contextmanager
    def given_back(self) -> Iterator[None]:
        if not getattr(self._local, "held", False):
            yield
            return
        self._local.held = False
        self._release()
        try:
            yield
        finally:
            self._acquire(urgent=False)
            self._local.held = True


turns = Turns()
