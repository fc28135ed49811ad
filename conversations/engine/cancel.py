"""A run's stop request, mirrored in Redis twice: a flag and a broadcast.

The broadcast (PUBLISH on one channel) reaches every worker's streaming loop at once, so a
stop takes effect at the next stream chunk (`cancel_requests_follow`, used by
conversations/engine/streaming.py). Pub/sub keeps nothing for a subscriber that is away, so the
flag is the durable copy: a streaming step still looks for it about once a second without
touching the database, and finds a stop the broadcast missed; a step running a tool looks
for it twice a second, to cancel the call in flight.

`Run.cancel_requested_at` stays the record: the flag only makes the check cheap. A step
still reads the column at each step boundary and at each lease renewal, so a flag lost
with a Redis restart delays a stop by at most one renewal period.
"""

import asyncio
import contextlib
import logging
import os
from collections.abc import Callable

import redis.asyncio as aioredis

from conversations.engine import eventlog

log = logging.getLogger(__name__)

# Long enough to outlive any run; the flag is never cleared, it expires.
FLAG_SECONDS = 24 * 3600
CANCEL_CHANNEL = "parley:cancel"
# Backoff between attempts to subscribe again after the connection dropped.
RESUBSCRIBE_FIRST_SECONDS = 0.1
RESUBSCRIBE_MAX_SECONDS = 5.0
# A quiet subscription still wakes this often, so its health check (a PING) can run.
LISTEN_SECONDS = 10.0


def cancel_flag_key(run_id: str) -> str:
    return f"parley:run:{run_id}:cancel"


def cancel_flag_raise(*, run_id: str) -> None:
    """Raise the flag, then tell the streaming loops (one round trip)."""
    pipe = eventlog.redis_client().pipeline(transaction=False)
    pipe.set(cancel_flag_key(run_id), 1, ex=FLAG_SECONDS)
    pipe.publish(CANCEL_CHANNEL, run_id)
    pipe.execute()


def cancel_flag_raised(*, run_id: str) -> bool:
    return bool(eventlog.redis_client().exists(cancel_flag_key(run_id)))


def cancel_flags_raised(*, run_ids: list[str]) -> set[str]:
    """Which of these runs have their stop flag up: one round trip for them all."""
    if not run_ids:
        return set()
    values = eventlog.redis_client().mget([cancel_flag_key(run_id) for run_id in run_ids])
    return {run_id for run_id, value in zip(run_ids, values, strict=True) if value is not None}


def cancel_subscriber_name() -> str:
    """The connection name of this process's subscription (visible in CLIENT LIST)."""
    return f"parley-cancels-{os.getpid()}"


async def cancel_requests_follow(*, url: str, on_request: Callable[[str], None]) -> None:
    """Call `on_request(run_id)` for each stop published, until cancelled.

    Never fails otherwise: a dropped connection is subscribed again, with backoff while it
    keeps failing. Stops published meanwhile are missed here; the flag still has them.
    """
    delay = RESUBSCRIBE_FIRST_SECONDS
    while True:
        client = aioredis.Redis.from_url(
            url,
            client_name=cancel_subscriber_name(),
            socket_keepalive=True,  # a silently dead peer is found by the OS
            health_check_interval=int(LISTEN_SECONDS),
        )
        pubsub = client.pubsub(ignore_subscribe_messages=True)
        try:
            await pubsub.subscribe(CANCEL_CHANNEL)
            delay = RESUBSCRIBE_FIRST_SECONDS
            while True:
                message = await pubsub.get_message(
                    ignore_subscribe_messages=True, timeout=LISTEN_SECONDS
                )
                if message is not None and message.get("type") == "message":
                    data = message["data"]
                    on_request(data.decode() if isinstance(data, bytes) else str(data))
        except asyncio.CancelledError:
            raise
        except Exception:
            # A blip is not worth a warning (redis-py already retried); an outage is: stops
            # then wait for the flag check.
            level = logging.WARNING if delay >= RESUBSCRIBE_MAX_SECONDS else logging.DEBUG
            log.log(level, "stop requests: not subscribed, again in %.1fs", delay, exc_info=True)
        finally:
            with contextlib.suppress(Exception):
                await pubsub.aclose()
            with contextlib.suppress(Exception):
                await client.aclose()
        await asyncio.sleep(delay)
        delay = min(delay * 2, RESUBSCRIBE_MAX_SECONDS)
