"""Running test code on several threads at once."""

import threading


def run_threads(*targets) -> None:
    """Each target on a thread of its own, all started before any is waited for; fails
    when one is still running after 10 s."""
    threads = [threading.Thread(target=target) for target in targets]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
        assert not thread.is_alive(), "a thread is stuck waiting for a turn"
