"""Redis from asyncio code: a connection pool per event loop, and event-log appends sent
together.

asyncio connections belong to the loop that made them, so each loop has its own pool. The
streaming loop (conversations/engine/streaming.py) appends to every streaming run's log. Sent one
by one, 200 replies in flight are up to 200 commands in flight, each taking a connection
from the pool (making one, in a burst), each with its own send and receive, and every
socket call lets a waiting step thread take the GIL from the loop. `appends_batcher`
queues the appends of a loop instead and sends them as one pipeline per round trip: while
a batch is in flight the next one gathers, so a busy loop sends fewer, larger batches.
"""

import asyncio
import functools
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import hiredis
import redis
import redis.asyncio as aioredis
from django.conf import settings
from redis.connection import HiredisRespSerializer
from redis.typing import EncodableT, FieldT
from redis.utils import HIREDIS_AVAILABLE

# Longer than any XREAD BLOCK, so a quiet follower is never taken for a dead socket.
SOCKET_TIMEOUT = 30.0
# Each follower holds a connection for the length of its XREAD BLOCK: no useful cap.
MAX_CONNECTIONS = 100_000

_sync_pools: dict[str, redis.BlockingConnectionPool] = {}
_sync_clients: dict[str, redis.Redis] = {}
_sync_pools_lock = threading.Lock()


def redis_client() -> redis.Redis:
    """This process's client for settings.REDIS_URL (read per call: tests change it).

    One client per pool, shared by every thread (redis-py clients are thread-safe): a
    streaming step asks Redis about once a second, and building a client cost more than
    the command it sent.
    """
    url = settings.REDIS_URL
    with _sync_pools_lock:
        pool = _sync_pools.get(url)
        if pool is None:
            # Blocking: a worker with more threads than connections waits its turn for
            # one instead of failing the step (redis-py 8 caps a plain pool and raises).
            pool = _sync_pools[url] = redis.BlockingConnectionPool.from_url(
                url,
                socket_timeout=SOCKET_TIMEOUT,
                max_connections=settings.PARLEY_REDIS_MAX_CONNECTIONS,
                timeout=SOCKET_TIMEOUT,
            )
        client = _sync_clients.get(url)
        if client is None or client.connection_pool is not pool:  # a new pool, a new client
            client = _sync_clients[url] = redis.Redis(connection_pool=pool)
    return client


_Loop = asyncio.AbstractEventLoop


def async_pool() -> aioredis.ConnectionPool:
    """This loop's pool for settings.REDIS_URL (read per call: tests change it).

    Reusing connections matters: a web process follows a run per open socket, and opening
    a connection costs the loop far more than a command (redis-py reads package metadata
    from disk for each one).
    """
    pools = _pools.setdefault(asyncio.get_running_loop(), {})
    url = settings.REDIS_URL
    pool = pools.get(url)
    if pool is None:
        pool = pools[url] = aioredis.ConnectionPool.from_url(
            url, socket_timeout=SOCKET_TIMEOUT, max_connections=MAX_CONNECTIONS
        )
        if HIREDIS_AVAILABLE:
            chosen: Any = pool.connection_class
            pool.connection_class = _packed_by_hiredis(chosen)
    return pool


def async_client() -> aioredis.Redis:
    """This loop's client over `async_pool()`: building a client reads package metadata
    from disk (about 1 ms), more than the commands a follower sends with it."""
    clients = _clients.setdefault(asyncio.get_running_loop(), {})
    url = settings.REDIS_URL
    client = clients.get(url)
    if client is None or client.connection_pool is not async_pool():
        client = clients[url] = aioredis.Redis(connection_pool=async_pool())
    return client


class _HiredisPacking:
    """Commands packed in C, as redis-py's sync connections already do: its asyncio ones
    pack in Python, which for a read over a thousand followed logs cost more than the
    read itself."""

    _hiredis_serializer = HiredisRespSerializer()

    def pack_command(self, *args: Any) -> list[bytes]:
        first = args[0]
        if (" " if isinstance(first, str) else b" ") not in first:
            try:
                return [hiredis.pack_command(args)]
            except TypeError:
                pass  # a memoryview, or a value Redis cannot take: as redis-py does it
        return self._hiredis_serializer.pack(*args)


@functools.cache
def _packed_by_hiredis(connection_class: type[Any]) -> type[Any]:
    # Whatever class the URL chose (TCP, TLS, a Unix socket), packing in C.
    return type(
        f"HiredisPacked{connection_class.__name__}", (_HiredisPacking, connection_class), {}
    )


_pools: weakref.WeakKeyDictionary[_Loop, dict[str, aioredis.ConnectionPool]] = (
    weakref.WeakKeyDictionary()
)
_clients: weakref.WeakKeyDictionary[_Loop, dict[str, aioredis.Redis]] = weakref.WeakKeyDictionary()


@dataclass
class _Append:
    key: str
    fields: dict[FieldT, EncodableT]
    entry_id: str
    ttl: int | None
    reply: asyncio.Future[Any]


class AppendsBatcher:
    """XADDs (each with an optional EXPIRE) of one loop, pipelined together."""

    def __init__(self, client: aioredis.Redis) -> None:
        self._client = client
        self._queue: list[_Append] = []
        self._sender: asyncio.Task[None] | None = None

    async def xadd(
        self, key: str, fields: dict[FieldT, EncodableT], entry_id: str, ttl: int | None
    ) -> Any:
        """Append an entry with an explicit id, then set the key's TTL if `ttl`. Returns
        Redis's reply to the XADD: the entry id, or the ResponseError it answered (a
        refused id is the caller's to judge). Raises what the connection raised."""
        reply: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._queue.append(_Append(key, fields, entry_id, ttl, reply))
        if self._sender is None:
            self._sender = asyncio.create_task(self._send())
        return await reply

    async def _send(self) -> None:
        try:
            while self._queue:
                batch, self._queue = self._queue, []
                await self._send_batch(batch)
        except BaseException as error:  # cancelled with its loop: fail what still waits
            _fail(self._queue, error)
            self._queue = []
            raise
        finally:
            self._sender = None

    async def _send_batch(self, batch: list[_Append]) -> None:
        pipe = self._client.pipeline(transaction=False)
        for append in batch:
            pipe.xadd(append.key, append.fields, id=append.entry_id)
            if append.ttl is not None:
                # Runs even if the XADD is refused, which at worst resets a live writer's
                # TTL: its own terminal event sets it again.
                pipe.expire(append.key, append.ttl)
        try:
            replies = iter(await pipe.execute(raise_on_error=False))
        except Exception as error:
            # This batch's writers get the error; appends queued meanwhile still go out.
            _fail(batch, error)
            return
        except BaseException as error:
            _fail(batch, error)
            raise
        for append in batch:
            reply = next(replies)
            if append.ttl is not None:
                next(replies)
            if not append.reply.done():  # a cancelled caller no longer waits
                append.reply.set_result(reply)


def _fail(appends: list[_Append], error: BaseException) -> None:
    for append in appends:
        if not append.reply.done():
            append.reply.set_exception(_as_exception(error))


def _as_exception(error: BaseException) -> Exception:
    # A sender cancelled (its loop shutting down) fails the appends it carried.
    return error if isinstance(error, Exception) else ConnectionError("event log write aborted")


T = TypeVar("T")
_PerLoop = weakref.WeakKeyDictionary[_Loop, dict[str, T]]


def per_loop(
    registry: "weakref.WeakKeyDictionary[_Loop, dict[str, T]]", make: Callable[[], T]
) -> T:
    """The running loop's object for settings.REDIS_URL in `registry`, made by `make` the
    first time (the URL is read per call: tests change it)."""
    objects = registry.setdefault(asyncio.get_running_loop(), {})
    url = settings.REDIS_URL
    found = objects.get(url)
    if found is None:
        found = objects[url] = make()
    return found


def appends_batcher() -> AppendsBatcher:
    """This loop's batcher for settings.REDIS_URL."""
    return per_loop(_batchers, lambda: AppendsBatcher(async_client()))


_batchers: weakref.WeakKeyDictionary[_Loop, dict[str, AppendsBatcher]] = weakref.WeakKeyDictionary()
