"""The request budgets (conversations/limits.py): a rate per period that lets requests back
in as the period slides, refusals that say when to come back and spend nothing, no more
passing than the rate under concurrency, and one budget for a user whichever door the
requests come through (the per-entry-point walk is tests/conversations/test_entry_points.py).
"""

import threading
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
import redis
from asgiref.sync import sync_to_async
from django.core.cache import cache
from django.core.exceptions import ImproperlyConfigured
from rest_framework.test import APIClient

from accounts import services as account_services
from conversations import limits
from conversations.errors import Throttled
from conversations.models import Message, Run
from tests.support.sockets import open_socket

pytestmark = pytest.mark.usefixtures("fresh_throttles")

START = 6_000_000.0  # a time on a bucket boundary of every period


@pytest.fixture
def clock(monkeypatch) -> list[float]:
    """The budgets' time, moved by the test."""
    now = [START]
    monkeypatch.setattr(limits, "time", SimpleNamespace(time=lambda: now[0]))
    return now


def refused_for(**kwargs: Any) -> int | None:
    """None when the request is let through, else the seconds it is told to wait."""
    try:
        limits.budgets_take(ident=7, **kwargs)
    except Throttled as refused:
        return refused.wait
    return None


def test_a_budget_lets_its_rate_through_then_says_when_to_come_back(clock, settings):
    settings.PARLEY_API_THROTTLE_RATE = "2/minute"
    assert refused_for() is None
    assert refused_for() is None
    clock[0] += 30
    wait = refused_for()
    # Back once the first two have left the last minute (to the bucket: 6 s).
    assert wait is not None
    assert 30 <= wait <= 36
    clock[0] += wait - 1
    assert refused_for() is not None
    clock[0] += 1
    assert refused_for() is None


def test_the_period_slides_rather_than_resetting_at_a_boundary(clock, settings):
    settings.PARLEY_API_THROTTLE_RATE = "3/minute"
    clock[0] += 59
    for _ in range(3):
        assert refused_for() is None
    clock[0] += 2  # a new minute has begun, but the three are a second or two old
    assert refused_for() is not None
    clock[0] += 60
    assert refused_for() is None


def test_a_refused_request_spends_nothing(clock, settings):
    settings.PARLEY_API_THROTTLE_RATE = "3/minute"
    settings.PARLEY_API_MODEL_THROTTLE_RATE = "1/minute"
    assert refused_for(model_work=True) is None
    for _ in range(5):  # refused by the model budget: the user's is given back each time
        assert refused_for(model_work=True) is not None
    assert refused_for() is None
    assert refused_for() is None
    assert refused_for() is not None


def test_model_work_spends_both_budgets(clock, settings):
    settings.PARLEY_API_THROTTLE_RATE = "1/minute"
    settings.PARLEY_API_MODEL_THROTTLE_RATE = "5/minute"
    assert refused_for(model_work=True) is None
    assert refused_for() is not None


def test_each_user_has_a_budget_of_their_own(clock, settings):
    settings.PARLEY_API_THROTTLE_RATE = "1/minute"
    limits.budgets_take(ident=1)
    limits.budgets_take(ident=2)
    with pytest.raises(Throttled):
        limits.budgets_take(ident=1)


@pytest.fixture(params=["memory", "redis"])
def shared_cache(request, settings) -> Iterator[str]:
    """The budgets' cache: this process's memory, or a Redis server as deployed (the
    test's own database of it, which is emptied)."""
    if request.param == "redis":
        url = request.getfixturevalue("redis_url").rsplit("/", 1)[0] + "/15"
        settings.CACHES = {"default": {"BACKEND": "config.cache.SharedRedisCache", "LOCATION": url}}
    cache.clear()
    yield request.param
    cache.clear()


def test_concurrent_requests_never_pass_more_than_the_rate(settings, shared_cache):
    settings.PARLEY_API_THROTTLE_RATE = "5/minute"
    passed: list[bool] = []
    start = threading.Barrier(20)

    def request() -> None:
        start.wait()
        passed.append(refused_for() is None)

    threads = [threading.Thread(target=request) for _ in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert passed.count(True) == 5


@pytest.mark.parametrize("shared_cache", ["redis"], indirect=True)
def test_the_counters_expire_on_their_own(settings, shared_cache):
    settings.PARLEY_API_THROTTLE_RATE = "5/minute"
    refused_for()
    client = redis.Redis.from_url(settings.CACHES["default"]["LOCATION"])
    keys = client.keys("*throttle_user_7_*")
    assert keys
    assert all(0 < client.ttl(key) <= 120 for key in keys)
    client.close()


def test_an_empty_rate_is_no_limit_and_a_malformed_one_is_refused(settings):
    settings.PARLEY_API_THROTTLE_RATE = ""
    for _ in range(50):
        assert refused_for() is None
    settings.PARLEY_API_THROTTLE_RATE = "lots/minute"
    with pytest.raises(ImproperlyConfigured, match="PARLEY_API_THROTTLE_RATE"):
        refused_for()


def test_forgetting_a_user_gives_their_budgets_back(settings):
    settings.PARLEY_API_THROTTLE_RATE = "1/minute"
    assert refused_for() is None
    assert refused_for() is not None
    limits.budgets_forget(ident=7)
    assert refused_for() is None


# --- one budget across the doors ---------------------------------------------------------------


def keyed_client(secret: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    return client


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("redis_url", "close_thread_connections")
async def test_one_key_spends_one_request_budget_on_every_door(owner, conversation, settings):
    settings.PARLEY_API_THROTTLE_RATE = "3/minute"
    _, secret = await sync_to_async(account_services.api_key_create)(owner=owner, name="bot")
    client = keyed_client(secret)
    get = sync_to_async(client.get)
    assert (await get("/api/v1/tools/")).status_code == 200
    assert (await get("/openai/v1/models")).status_code == 200
    ws = await open_socket(conversation.pk, (b"authorization", f"Bearer {secret}".encode()))
    await ws.send_json_to({"type": "ping"})
    assert await ws.receive_json_from(timeout=5) == {"type": "pong"}
    await ws.send_json_to({"type": "ping"})
    refused = await ws.receive_json_from(timeout=5)
    assert (refused["type"], refused["code"]) == ("error", "throttled")
    assert refused["retry_after"] >= 1
    assert (await get("/api/v1/tools/")).status_code == 429
    assert (await get("/openai/v1/models")).status_code == 429
    await ws.disconnect()


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("redis_url", "close_thread_connections")
async def test_a_socket_starts_no_run_once_the_http_doors_spent_the_model_budget(
    owner, conversation, settings, enqueued
):
    settings.PARLEY_API_MODEL_THROTTLE_RATE = "2/minute"
    settings.PARLEY_DEMO_TOKENS_PER_SECOND = 0
    _, secret = await sync_to_async(account_services.api_key_create)(owner=owner, name="bot")
    post = sync_to_async(keyed_client(secret).post)
    stateless = {"messages": [{"role": "user", "content": "Hi"}]}
    assert (await post("/api/v1/stateless/chat/", stateless, format="json")).status_code == 200
    unstored = {"model": "m", "input": "Hi", "store": False}
    assert (await post("/openai/v1/responses", unstored, format="json")).status_code == 200
    ws = await open_socket(conversation.pk, (b"authorization", f"Bearer {secret}".encode()))
    await ws.send_json_to({"type": "message.create", "content": "And now?"})
    refused = await ws.receive_json_from(timeout=5)
    assert (refused["type"], refused["code"]) == ("error", "throttled")
    assert not await sync_to_async(Run.objects.exists)()
    assert not await sync_to_async(Message.objects.exists)()
    assert enqueued == []
    await ws.disconnect()
