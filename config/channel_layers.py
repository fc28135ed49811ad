"""The Channels layer configuration, shared by the settings and the test/benchmark setup."""

from typing import Any


def channel_layers_config(redis_url: str) -> dict[str, Any]:
    # The pub/sub layer rather than the list-based one, for three reasons:
    # - a group send is one PUBLISH that every subscribed web process receives, where the
    #   list layer pushes to each member's list, so fan-out to many sockets costs less;
    # - the layer only carries conversation notifications, which need no storage (run
    #   events live in the event log and are replayed from there);
    # - with redis-py 8 the list layer's blocking receive broke in two ways: its 5 s
    #   blocking pop met the client's new 5 s default socket timeout, dropping every idle
    #   socket, and with a longer timeout a cancelled receive kept polling forever,
    #   leaking a task per closed socket.
    return {
        "default": {
            "BACKEND": "channels_redis.pubsub.RedisPubSubChannelLayer",
            "CONFIG": {"hosts": [{"address": redis_url}], "prefix": "parley:channels"},
        }
    }
