"""ASGI entry point: Daphne serves HTTP and websockets from this one application."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.local")

# Django must be set up before anything imports models.
django_application = get_asgi_application()

from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from django.urls import path  # noqa: E402

from accounts.websocket import WebsocketAuthMiddleware  # noqa: E402
from conversations.consumers import ConversationConsumer  # noqa: E402

application = ProtocolTypeRouter(
    {
        "http": django_application,
        "websocket": WebsocketAuthMiddleware(
            URLRouter(
                [
                    path(
                        "ws/conversations/<uuid:conversation_id>/",
                        ConversationConsumer.as_asgi(),
                    ),
                ]
            )
        ),
    }
)
