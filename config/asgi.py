"""ASGI entry point: Daphne serves HTTP and websockets from this one application."""

import gc
import os
import sys

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.local")

# Django must be set up before anything imports models.
django_application = get_asgi_application()

from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from django.urls import path  # noqa: E402

from accounts.websocket import WebsocketAuthMiddleware  # noqa: E402
from config.body_limit import BodyLimit  # noqa: E402
from config.request_id import websocket_log_ids  # noqa: E402
from conversations.consumers import ConversationConsumer  # noqa: E402

application = ProtocolTypeRouter(
    {
        "http": BodyLimit(django_application),
        "websocket": WebsocketAuthMiddleware(
            URLRouter(
                [
                    path(
                        "ws/conversations/<uuid:conversation_id>/",
                        websocket_log_ids(ConversationConsumer.as_asgi()),
                    ),
                ]
            )
        ),
    }
)


def _freeze_startup_heap() -> None:
    """Leave the objects of a started web process (Django, the apps, every view module)
    out of garbage collection. A full collection otherwise walks about 150,000 of them and
    holds the GIL for 70-130 ms, stalling every socket the process relays to."""
    from django.urls import get_resolver

    get_resolver().url_patterns  # noqa: B018  (imports every view now, not on first use)
    gc.collect()
    gc.freeze()


if "daphne" in sys.argv[0]:  # a server starting, not a test or a command importing this
    _freeze_startup_heap()
