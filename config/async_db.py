"""Database calls from async code (websocket consumers, async views)."""

import functools
from collections.abc import Awaitable, Callable
from typing import ParamSpec, TypeVar

from asgiref.sync import sync_to_async
from django.db import close_old_connections

P = ParamSpec("P")
R = TypeVar("R")


def db_call(func: Callable[P, R]) -> Callable[P, Awaitable[R]]:
    """Run `func` in a worker thread and close connections that are past their age,
    like Channels' `database_sync_to_async`, but not thread-sensitive.

    Thread-sensitive calls all share one thread per process, so every socket's database
    work in a web process queued behind every other's (run starts spread ~100 ms apart
    under load). These functions use no thread-bound state, so they can run in parallel.

    The connection clean-up runs inside the call: Django keeps connections per context,
    and the call runs in a copy of the caller's context, where a clean-up made around it
    (as Channels does) finds no connection to close.
    """

    @functools.wraps(func)
    def with_connection_cleanup(*args: P.args, **kwargs: P.kwargs) -> R:
        close_old_connections()
        try:
            return func(*args, **kwargs)
        finally:
            close_old_connections()

    return sync_to_async(with_connection_cleanup, thread_sensitive=False)
