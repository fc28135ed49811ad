"""Waiting in tests for something another thread or process does."""

import time
from collections.abc import Callable


def wait_until(
    condition: Callable[[], object],
    *,
    timeout: float = 20,
    what: str = "condition",
    interval: float = 0.02,
    details: Callable[[], str] | None = None,
) -> None:
    """Poll `condition` until it is true; fail after `timeout` seconds, naming `what` and
    adding `details()` (a process's log, say) to the failure."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(interval)
    extra = f"\n{details()}" if details is not None else ""
    raise AssertionError(f"timed out waiting for {what}{extra}")
