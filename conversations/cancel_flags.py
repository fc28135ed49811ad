"""A run's stop request mirrored in Redis, so a streaming step can look for it every
second without touching the database.

`Run.cancel_requested_at` stays the record: the flag only makes the check cheap. A step
still reads the column at each step boundary and at each lease renewal, so a flag lost
with a Redis restart delays a stop by at most one renewal period.
"""

from conversations import events

# Long enough to outlive any run; the flag is never cleared, it expires.
FLAG_SECONDS = 24 * 3600


def cancel_flag_key(run_id: str) -> str:
    return f"parley:run:{run_id}:cancel"


def cancel_flag_raise(*, run_id: str) -> None:
    events.redis_client().set(cancel_flag_key(run_id), 1, ex=FLAG_SECONDS)


def cancel_flag_raised(*, run_id: str) -> bool:
    return bool(events.redis_client().exists(cancel_flag_key(run_id)))
