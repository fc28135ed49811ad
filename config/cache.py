"""Django's Redis cache, with one connection pool and one client per server for the process.

Django keeps a cache object per thread and per async context, and its Redis client makes
its own connection pool per object. Under ASGI each request runs in a context of its own,
so every API request opened a new Redis connection for its throttle counters (redis-py
reads package metadata from disk for each one, and the server keeps the socket until the
object is collected), and each command built a new client: together about a fifth of
the CPU an API request cost. Pools and clients are thread-safe, so the process shares
them here; everything else is Django's backend unchanged, with one addition:
`incr_expiring`, the request budgets' counter in one round trip.
"""

import threading
from typing import Any

from django.core.cache.backends.redis import RedisCache, RedisCacheClient

_lock = threading.Lock()
_shared: dict[str, tuple[Any, Any]] = {}  # (pool, client) by server and options


class SharedRedisCacheClient(RedisCacheClient):
    def _shared(self, write: bool) -> tuple[Any, Any]:
        django: Any = self  # the base class's attributes, which the stubs do not declare
        server = django._servers[django._get_connection_pool_index(write)]
        pool_class, options = django._pool_class, django._pool_options
        # Options are part of the key: a test that configures another cache gets its own.
        key = repr((server, pool_class, sorted(options.items(), key=str)))
        with _lock:
            found = _shared.get(key)
            if found is None:
                pool = pool_class.from_url(server, **options)
                found = _shared[key] = (pool, django._client(connection_pool=pool))
        return found

    def _get_connection_pool(self, write: bool) -> Any:
        return self._shared(write)[0]

    def get_client(self, key: Any = None, *, write: bool = False) -> Any:
        return self._shared(write)[1]


class SharedRedisCache(RedisCache):
    def __init__(self, server: str, params: dict[str, Any]) -> None:
        super().__init__(server, params)
        self._class = SharedRedisCacheClient

    def incr_expiring(self, key: str, *, timeout: int) -> int:
        """One more on the counter at `key`, made if missing, which expires `timeout`
        seconds after its last count: one round trip, where `incr` first asks whether the
        key exists and a missing key takes an `add` as well (conversations/limits.py)."""
        key = self.make_and_validate_key(key)
        django: Any = self  # the base class's attributes, which the stubs do not declare
        pipe = django._cache.get_client(key, write=True).pipeline(transaction=False)
        pipe.incr(key)
        pipe.expire(key, timeout)
        value, _ = pipe.execute()
        return int(value)
