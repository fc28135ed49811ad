"""The Redis cache shares its connections across the process (config/cache.py), against a
real Redis-protocol server: Django makes a cache object per thread and per request
context, and each used to open connections of its own."""

import threading
import uuid
from typing import Any

from django.core.cache import caches
from django.test import override_settings


def cache_settings(location: str) -> dict[str, Any]:
    return {
        "default": {
            "BACKEND": "config.cache.SharedRedisCache",
            "LOCATION": location,
            "KEY_PREFIX": f"test-{uuid.uuid4().hex[:8]}",
        }
    }


def client_of(cache: Any) -> Any:
    return cache._cache.get_client()


def in_threads(count: int, work: Any) -> list[Any]:
    results: list[Any] = [None] * count

    def run(index: int) -> None:
        results[index] = work(index)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    return results


def test_cache_objects_of_every_thread_share_one_pool_and_client(redis_url):
    with override_settings(CACHES=cache_settings(redis_url)):

        def work(index: int) -> tuple[int, Any, Any]:
            cache = caches["default"]  # a new object in each thread, as Django makes it
            for n in range(10):
                cache.set(f"k{index}-{n}", n)
                assert cache.get(f"k{index}-{n}") == n
            client = client_of(cache)
            return id(cache), client, client.connection_pool

        results = in_threads(8, work)
        assert len({cache_id for cache_id, _, _ in results}) == 8  # Django's objects differ
        assert len({id(client) for _, client, _ in results}) == 1  # but share one client
        pool = results[0][2]
        # 160 commands from 8 threads: at most one connection per thread, never one each.
        assert pool._created_connections <= 8


def test_the_cache_behaves_as_djangos(redis_url):
    with override_settings(CACHES=cache_settings(redis_url)):
        cache = caches["default"]
        cache.set("counter", 1, timeout=60)
        assert cache.incr("counter", 4) == 5
        assert cache.add("counter", 9) is False
        cache.set_many({"a": {"nested": [1, 2]}, "b": "text"})
        assert cache.get_many(["a", "b", "missing"]) == {"a": {"nested": [1, 2]}, "b": "text"}
        cache.delete("counter")
        assert cache.get("counter", "gone") == "gone"


def test_another_server_gets_its_own_pool(redis_url):
    other = redis_url.rsplit("/", 1)[0] + "/15"
    with override_settings(CACHES=cache_settings(redis_url)):
        first = client_of(caches["default"]).connection_pool
    with override_settings(CACHES=cache_settings(other)):
        second = client_of(caches["default"]).connection_pool
    assert first is not second
    assert second.connection_kwargs.get("db") == 15
