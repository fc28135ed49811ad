"""The Redis broker transport, made to survive a broker restart while steps run.

When the connection to Redis drops, the worker closes it before reconnecting, and closing
a channel tries to put back the messages of the steps still running (they are acknowledged
late, when a step ends). By then the connection object is already torn down, so kombu's
Redis transport raised AttributeError there instead of a connection error; nothing caught
it and the worker process exited ("Unrecoverable error"), taking every reply in flight
with it. Here that restore gives up quietly instead: the messages stay in the broker's
unacknowledged index (and come back after the visibility timeout if Redis kept them),
and the runs themselves never depended on them: a run whose step was lost is handed to a
worker again by the watchdog once its lease expires.
"""

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from kombu.transport import redis as kombu_redis
from redis.exceptions import ConnectionError as RedisConnectionError

log = logging.getLogger(__name__)


class QoS(kombu_redis.QoS):
    def restore_unacked(self, client: Any = None) -> None:
        try:
            super().restore_unacked(client)
        except (AttributeError, RedisConnectionError) as exc:
            log.warning(
                "broker connection gone: %d running steps not put back now (%s); their "
                "runs are resumed by the watchdog",
                len(self._delivered or ()),
                type(exc).__name__,
            )
            if self._delivered is not None:
                self._delivered.clear()

    # A step that was running when the connection dropped ends later, on a channel whose
    # connection is gone: its acknowledgement cannot reach the broker any more. The run's
    # outcome is already stored; the message comes back at worst after the visibility
    # timeout and its step then finds nothing to do.
    def ack(self, delivery_tag: Any) -> None:
        try:
            super().ack(delivery_tag)
        except (AttributeError, RedisConnectionError) as exc:
            self._forget(delivery_tag, "acknowledge", exc)

    def reject(self, delivery_tag: Any, requeue: bool = False) -> None:
        try:
            super().reject(delivery_tag, requeue=requeue)
        except (AttributeError, RedisConnectionError) as exc:
            self._forget(delivery_tag, "reject", exc)

    def _forget(self, delivery_tag: Any, what: str, exc: Exception) -> None:
        if self._delivered is not None:
            self._delivered.pop(delivery_tag, None)
        log.info("broker connection gone: could not %s a finished step (%s)", what, exc)


class Channel(kombu_redis.Channel):
    QoS = QoS
    _shared_client: Any = None

    @contextmanager
    def conn_or_acquire(self, client: Any = None) -> Iterator[Any]:
        """A client for one command (a publish, an acknowledgement): kombu builds a new one
        each time, which cost more CPU than the command itself. A client only wraps the
        channel's connection pool and is thread-safe, so one is kept per pool and shared."""
        if client:
            yield client
            return
        shared = self._shared_client
        if shared is None or shared.connection_pool is not self.pool:  # the pool was reset
            shared = self._shared_client = self._create_client()  # type: ignore[attr-defined]
        yield shared


class Transport(kombu_redis.Transport):
    Channel = Channel
